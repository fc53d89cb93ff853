package auth

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-io/strata/internal/testutil/tlstest"
)

// The files in testdata/pkcs8 were written once by OpenSSL 3.0 from ec.key
// and rsa.key with the password "strata-test":
//
//	openssl pkcs8 -topk8 -in ec.key  -v2 aes-256-cbc -v2prf hmacWithSHA256 -out ec-aes256-sha256.enc.key
//	openssl pkcs8 -topk8 -in rsa.key -v2 aes-128-cbc -v2prf hmacWithSHA1 -out rsa-aes128-sha1.enc.key
//	openssl pkcs8 -topk8 -in ec.key  -v2 aes-192-cbc -v2prf hmacWithSHA512 -iter 5000 -out ec-aes192-sha512.enc.key
//	openssl pkcs8 -topk8 -in ec.key  -v2 des3 -out ec-des3-sha256.enc.key
//	openssl pkcs8 -topk8 -in ec.key  -v1 PBE-SHA1-3DES -out ec-pbe-sha1-3des.enc.key  (refused)
//	openssl pkcs8 -topk8 -in ec.key  -scrypt -out ec-scrypt.enc.key                   (refused)
//	openssl ec -in ec.key -aes256 -out ec-legacy.enc.key                              (refused)
//
// They pin the decoder to bytes another implementation wrote, independent
// of the openssl found (or not) on the machine running the tests.
const vectorPassword = "strata-test"

func pemBytes(t testing.TB, path string) *pem.Block {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	return b
}

func TestDecryptPKCS8Vectors(t *testing.T) {
	dir := filepath.Join("testdata", "pkcs8")
	for _, tc := range []struct{ file, plain string }{
		{"ec-aes256-sha256.enc.key", "ec.key"},
		{"rsa-aes128-sha1.enc.key", "rsa.key"},
		{"ec-aes192-sha512.enc.key", "ec.key"},
		{"ec-des3-sha256.enc.key", "ec.key"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			enc := pemBytes(t, filepath.Join(dir, tc.file))
			if enc.Type != "ENCRYPTED PRIVATE KEY" {
				t.Fatalf("type %q", enc.Type)
			}
			want := pemBytes(t, filepath.Join(dir, tc.plain)).Bytes
			got, err := DecryptPKCS8(enc.Bytes, []byte(vectorPassword))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("decrypted key differs from the plaintext key")
			}
			if _, err := x509.ParsePKCS8PrivateKey(got); err != nil {
				t.Fatal(err)
			}
			for _, wrong := range []string{"", "strata-tesT", vectorPassword + " "} {
				if _, err := DecryptPKCS8(enc.Bytes, []byte(wrong)); !errors.Is(err, ErrKeyPassword) {
					t.Fatalf("password %q: %v, want ErrKeyPassword", wrong, err)
				}
			}
		})
	}
	for file, name := range map[string]string{
		"ec-pbe-sha1-3des.enc.key": "PKCS#12 pbeWithSHAAnd3-KeyTripleDES-CBC",
		"ec-scrypt.enc.key":        "scrypt",
	} {
		_, err := DecryptPKCS8(pemBytes(t, filepath.Join(dir, file)).Bytes, []byte(vectorPassword))
		if !errors.Is(err, ErrKeyAlgorithm) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrKeyAlgorithm naming %s", file, err, name)
		}
	}
}

// TestDecryptPKCS8Malformed feeds structurally broken inputs, each of
// which must give an error (never a panic, never a key).
func TestDecryptPKCS8Malformed(t *testing.T) {
	good := pemBytes(t, filepath.Join("testdata", "pkcs8", "ec-aes256-sha256.enc.key")).Bytes
	inputs := [][]byte{nil, {0x30}, {0x30, 0x00}, good[:len(good)-1], append(append([]byte{}, good...), 0)}
	for i := range good {
		// Every one-byte truncation of the header region.
		if i < 90 {
			inputs = append(inputs, good[:i])
		}
	}
	for _, in := range inputs {
		if key, err := DecryptPKCS8(in, []byte(vectorPassword)); err == nil {
			t.Fatalf("%x decrypted to %x", in, key)
		}
	}
}

// FuzzDecryptPKCS8 checks that no input panics the decoder or makes it
// allocate beyond its input, and that what it returns is a PKCS#8
// structure. The iteration bound is lowered so that each input is cheap.
func FuzzDecryptPKCS8(f *testing.F) {
	dir := filepath.Join("testdata", "pkcs8")
	files, _ := filepath.Glob(filepath.Join(dir, "*.enc.key"))
	for _, file := range files {
		if b := pemBytes(f, file); b.Type == "ENCRYPTED PRIVATE KEY" {
			f.Add(b.Bytes, vectorPassword)
			f.Add(b.Bytes, "wrong")
		}
	}
	f.Fuzz(func(t *testing.T, der []byte, password string) {
		key, err := decryptPKCS8(der, []byte(password), 10_000)
		if err != nil {
			return
		}
		if len(key) >= len(der) {
			t.Fatalf("a %d-byte input decrypted to %d bytes", len(der), len(key))
		}
	})
}

// openssl runs the openssl command, skipping the test when it is absent.
func openssl(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed: the checked-in vectors (TestDecryptPKCS8Vectors) still run")
	}
	out, err := exec.Command("openssl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("openssl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestTLSStoreEncryptedKey encrypts a listener's key with the openssl on
// the machine, in each cipher and PRF Strata reads, and loads it as
// Kafka's PEM key store does: from ssl.keystore.location and inline from
// ssl.keystore.key, with ssl.key.password.
func TestTLSStoreEncryptedKey(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	pair := ca.Server(t, "enc")
	files := pair.Write(t, dir, "plain")
	const password = "p@ss word ü"
	for _, cipher := range []string{"aes-128-cbc", "aes-192-cbc", "aes-256-cbc", "des3"} {
		for _, prf := range []string{"hmacWithSHA1", "hmacWithSHA256", "hmacWithSHA384", "hmacWithSHA512"} {
			t.Run(cipher+"/"+prf, func(t *testing.T) {
				enc := openssl(t, "pkcs8", "-topk8", "-in", files.Key, "-v2", cipher, "-v2prf", prf, "-passout", "pass:"+password)
				if !bytes.HasPrefix(enc, []byte("-----BEGIN ENCRYPTED PRIVATE KEY-----")) {
					t.Fatalf("openssl wrote %q", enc)
				}
				keystore := filepath.Join(dir, cipher+prf+".pem")
				if err := os.WriteFile(keystore, append(append([]byte{}, enc...), pair.CertPEM...), 0o600); err != nil {
					t.Fatal(err)
				}
				for name, s := range map[string]TLSSettings{
					"location": {KeystoreLocation: keystore, KeyPassword: password},
					"inline":   {KeystoreChain: string(pair.CertPEM), KeystoreKey: string(enc), KeyPassword: password},
				} {
					st, err := NewTLSStore(s)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if got := st.Config().Certificates[0].Leaf.Subject.CommonName; got != "enc" {
						t.Fatalf("%s: serving %q", name, got)
					}
					s.KeyPassword = "wrong"
					if _, err := NewTLSStore(s); !errors.Is(err, ErrKeyPassword) {
						t.Fatalf("%s with a wrong password: %v", name, err)
					}
					s.KeyPassword = ""
					if _, err := NewTLSStore(s); !errors.Is(err, ErrKeyNeedsPassword) {
						t.Fatalf("%s without a password: %v", name, err)
					}
				}
			})
		}
	}
	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want error
			name string
		}{
			{[]string{"pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES"}, ErrKeyAlgorithm, "pbeWithSHAAnd3-KeyTripleDES-CBC"},
			{[]string{"pkcs8", "-topk8", "-v1", "PBE-MD5-DES"}, ErrKeyAlgorithm, "pbeWithMD5AndDES-CBC"},
			{[]string{"pkcs8", "-topk8", "-scrypt"}, ErrKeyAlgorithm, "scrypt"},
			{[]string{"pkcs8", "-topk8", "-v2", "camellia-256-cbc"}, ErrKeyAlgorithm, "cipher 1.2.392.200011.61.1.1.1.4"},
			{[]string{"ec", "-aes256"}, ErrLegacyEncryptedKey, "Proc-Type"},
		} {
			args := append(append([]string{}, tc.args...), "-in", files.Key, "-passout", "pass:"+password)
			if tc.args[0] == "pkcs8" {
				// OpenSSL 3 refuses the PBES1 ciphers without its legacy
				// provider; skip those it cannot write.
				if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
					t.Logf("openssl %s cannot write this key here (%v: %s); skipped", strings.Join(tc.args, " "), err, lastLineOf(out))
					continue
				}
			}
			enc := openssl(t, args...)
			_, err := NewTLSStore(TLSSettings{KeystoreChain: string(pair.CertPEM), KeystoreKey: string(enc), KeyPassword: password})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.name) {
				t.Errorf("%v: %v, want %v naming %q", tc.args, err, tc.want, tc.name)
			}
		}
	})
	t.Run("password for a plain key", func(t *testing.T) {
		_, err := NewTLSStore(TLSSettings{KeystoreLocation: files.Keystore, KeyPassword: password})
		if !errors.Is(err, ErrKeyNotEncrypted) {
			t.Fatalf("%v, want ErrKeyNotEncrypted", err)
		}
	})
}

func lastLineOf(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
