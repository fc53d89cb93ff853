package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"hash"
)

// An encrypted PKCS#8 private key ("-----BEGIN ENCRYPTED PRIVATE KEY-----",
// RFC 5958 section 3, PBES2 from RFC 8018 section 6.2), as written by
// `openssl pkcs8 -topk8 -v2 aes-256-cbc` and read by Kafka's PEM key store
// when ssl.key.password is set:
//
//	EncryptedPrivateKeyInfo ::= SEQUENCE {
//	    encryptionAlgorithm  AlgorithmIdentifier,  -- PBES2 and its parameters
//	    encryptedData        OCTET STRING }        -- CBC(PKCS#8 PrivateKeyInfo), PKCS#7 padded
//	PBES2-params ::= SEQUENCE {
//	    keyDerivationFunc AlgorithmIdentifier,     -- PBKDF2
//	    encryptionScheme  AlgorithmIdentifier }    -- aes{128,192,256}-CBC or des-ede3-cbc; parameters: the IV
//	PBKDF2-params ::= SEQUENCE {
//	    salt           OCTET STRING,
//	    iterationCount INTEGER,
//	    keyLength      INTEGER OPTIONAL,
//	    prf            AlgorithmIdentifier DEFAULT hmacWithSHA1 }
//
// Only PBES2 with PBKDF2 is read; PBES1, PKCS#12 PBE and scrypt are
// refused by name.

// ErrKeyPassword is returned when ssl.key.password does not decrypt the
// private key (or decrypts it to something that is not a PKCS#8 key,
// which is what a wrong password almost always gives).
var ErrKeyPassword = errors.New("auth: ssl.key.password does not decrypt the private key (wrong password?)")

// ErrKeyAlgorithm is returned, wrapped with the algorithm's name, for an
// encrypted key whose encryption scheme Strata does not implement.
var ErrKeyAlgorithm = errors.New("auth: unsupported private key encryption")

// maxPBKDF2Iterations bounds the work a key file can ask for: far above
// what openssl (2048) or current guidance (600,000 for SHA-256) uses, and
// still a few seconds of CPU at most.
const maxPBKDF2Iterations = 10_000_000

var (
	oidPBES2        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidHMACSHA1     = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 7}
	oidHMACSHA224   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 8}
	oidHMACSHA256   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}
	oidHMACSHA384   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 10}
	oidHMACSHA512   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 11}
	oidAES128CBC    = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidAES192CBC    = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidAES256CBC    = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
	oidDESEDE3CBC   = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
	oidScrypt       = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11591, 4, 11}
	unsupportedPBEs = map[string]string{
		"1.2.840.113549.1.5.1":    "PBES1 pbeWithMD2AndDES-CBC",
		"1.2.840.113549.1.5.3":    "PBES1 pbeWithMD5AndDES-CBC",
		"1.2.840.113549.1.5.4":    "PBES1 pbeWithMD2AndRC2-CBC",
		"1.2.840.113549.1.5.6":    "PBES1 pbeWithMD5AndRC2-CBC",
		"1.2.840.113549.1.5.10":   "PBES1 pbeWithSHA1AndDES-CBC",
		"1.2.840.113549.1.5.11":   "PBES1 pbeWithSHA1AndRC2-CBC",
		"1.2.840.113549.1.12.1.1": "PKCS#12 pbeWithSHAAnd128BitRC4",
		"1.2.840.113549.1.12.1.2": "PKCS#12 pbeWithSHAAnd40BitRC4",
		"1.2.840.113549.1.12.1.3": "PKCS#12 pbeWithSHAAnd3-KeyTripleDES-CBC",
		"1.2.840.113549.1.12.1.4": "PKCS#12 pbeWithSHAAnd2-KeyTripleDES-CBC",
		"1.2.840.113549.1.12.1.5": "PKCS#12 pbeWithSHAAnd128BitRC2-CBC",
		"1.2.840.113549.1.12.1.6": "PKCS#12 pbeWithSHAAnd40BitRC2-CBC",
		"1.3.14.3.2.7":            "des-cbc",
		"1.2.840.113549.3.2":      "rc2-cbc",
		"1.2.840.113549.3.9":      "rc5-cbc",
		"2.16.840.1.101.3.4.1.6":  "aes128-GCM",
		"2.16.840.1.101.3.4.1.46": "aes256-GCM",
		"1.3.6.1.4.1.11591.4.11":  "scrypt",
	}
)

type algorithmIdentifier struct {
	Algorithm  asn1.ObjectIdentifier
	Parameters asn1.RawValue `asn1:"optional"`
}

type encryptedPrivateKeyInfo struct {
	Algorithm     algorithmIdentifier
	EncryptedData []byte
}

type pbes2Params struct {
	KeyDerivationFunc algorithmIdentifier
	EncryptionScheme  algorithmIdentifier
}

type pbkdf2Params struct {
	Salt           asn1.RawValue
	IterationCount int
	KeyLength      int                 `asn1:"optional"`
	PRF            algorithmIdentifier `asn1:"optional"`
}

// unmarshalAll decodes der into v and refuses trailing bytes.
func unmarshalAll(der []byte, v any, what string) error {
	rest, err := asn1.Unmarshal(der, v)
	if err != nil {
		return fmt.Errorf("auth: the encrypted private key's %s: %w", what, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("auth: the encrypted private key's %s has %d trailing bytes", what, len(rest))
	}
	return nil
}

// DecryptPKCS8 decrypts the DER of an EncryptedPrivateKeyInfo with
// password and returns the DER of the PKCS#8 PrivateKeyInfo inside. It
// returns ErrKeyPassword for a wrong password and ErrKeyAlgorithm for a
// scheme it does not implement.
func DecryptPKCS8(der, password []byte) ([]byte, error) {
	return decryptPKCS8(der, password, maxPBKDF2Iterations)
}

func decryptPKCS8(der, password []byte, maxIterations int) ([]byte, error) {
	var info encryptedPrivateKeyInfo
	if err := unmarshalAll(der, &info, "structure"); err != nil {
		return nil, err
	}
	if !info.Algorithm.Algorithm.Equal(oidPBES2) {
		return nil, unsupported("scheme", info.Algorithm.Algorithm)
	}
	var params pbes2Params
	if err := unmarshalAll(info.Algorithm.Parameters.FullBytes, &params, "PBES2 parameters"); err != nil {
		return nil, err
	}
	newCipher, keyLen, err := encryptionScheme(params.EncryptionScheme.Algorithm)
	if err != nil {
		return nil, err
	}
	key, err := deriveKey(params.KeyDerivationFunc, password, keyLen, maxIterations)
	if err != nil {
		return nil, err
	}
	block, err := newCipher(key)
	if err != nil {
		return nil, fmt.Errorf("auth: the encrypted private key: %w", err)
	}
	var iv []byte
	if err := unmarshalAll(params.EncryptionScheme.Parameters.FullBytes, &iv, "IV"); err != nil {
		return nil, err
	}
	if len(iv) != block.BlockSize() {
		return nil, fmt.Errorf("auth: the encrypted private key's IV is %d bytes, want %d", len(iv), block.BlockSize())
	}
	data := info.EncryptedData
	if len(data) == 0 || len(data)%block.BlockSize() != 0 {
		return nil, fmt.Errorf("auth: the encrypted private key's data is %d bytes, not a positive multiple of the %d-byte block", len(data), block.BlockSize())
	}
	plain := make([]byte, len(data))
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(plain, data)
	plain, ok := unpad(plain, block.BlockSize())
	if !ok {
		return nil, ErrKeyPassword
	}
	// A wrong password passes the padding check about one time in 256;
	// what it decrypts to is then not a PKCS#8 structure. (Whether the key
	// inside is of a type Go reads is for the caller to find out.)
	var pki privateKeyInfo
	if rest, err := asn1.Unmarshal(plain, &pki); err != nil || len(rest) != 0 {
		return nil, ErrKeyPassword
	}
	return plain, nil
}

// unpad strips PKCS#7 padding (RFC 8018 section 6.1.1 step 4).
func unpad(b []byte, blockSize int) ([]byte, bool) {
	n := int(b[len(b)-1])
	if n == 0 || n > blockSize {
		return nil, false
	}
	for _, c := range b[len(b)-n:] {
		if int(c) != n {
			return nil, false
		}
	}
	return b[:len(b)-n], true
}

// privateKeyInfo is PKCS#8's PrivateKeyInfo (RFC 5208 section 5), the
// optional attributes left out.
type privateKeyInfo struct {
	Version    int
	Algorithm  pkix.AlgorithmIdentifier
	PrivateKey []byte
}

func encryptionScheme(oid asn1.ObjectIdentifier) (func([]byte) (cipher.Block, error), int, error) {
	switch {
	case oid.Equal(oidAES128CBC):
		return aes.NewCipher, 16, nil
	case oid.Equal(oidAES192CBC):
		return aes.NewCipher, 24, nil
	case oid.Equal(oidAES256CBC):
		return aes.NewCipher, 32, nil
	case oid.Equal(oidDESEDE3CBC):
		return des.NewTripleDESCipher, 24, nil
	}
	return nil, 0, unsupported("PBES2 cipher", oid)
}

func deriveKey(kdf algorithmIdentifier, password []byte, keyLen, maxIterations int) ([]byte, error) {
	if kdf.Algorithm.Equal(oidScrypt) {
		return nil, fmt.Errorf("%w: key derivation scrypt (use PBKDF2: openssl pkcs8 -topk8 -v2 aes-256-cbc)", ErrKeyAlgorithm)
	}
	if !kdf.Algorithm.Equal(oidPBKDF2) {
		return nil, unsupported("key derivation", kdf.Algorithm)
	}
	var p pbkdf2Params
	if err := unmarshalAll(kdf.Parameters.FullBytes, &p, "PBKDF2 parameters"); err != nil {
		return nil, err
	}
	if p.Salt.Class != asn1.ClassUniversal || p.Salt.Tag != asn1.TagOctetString || p.Salt.IsCompound {
		return nil, fmt.Errorf("%w: a PBKDF2 salt that is not an OCTET STRING", ErrKeyAlgorithm)
	}
	if p.IterationCount < 1 || p.IterationCount > maxIterations {
		return nil, fmt.Errorf("auth: the encrypted private key asks for %d PBKDF2 iterations; Strata accepts 1 to %d", p.IterationCount, maxIterations)
	}
	if p.KeyLength != 0 && p.KeyLength != keyLen {
		return nil, fmt.Errorf("auth: the encrypted private key's PBKDF2 key length is %d, its cipher takes %d", p.KeyLength, keyLen)
	}
	prf, err := pbkdf2PRF(p.PRF.Algorithm)
	if err != nil {
		return nil, err
	}
	key, err := pbkdf2.Key(prf, string(password), p.Salt.Bytes, p.IterationCount, keyLen)
	if err != nil {
		return nil, fmt.Errorf("auth: the encrypted private key: PBKDF2: %w", err)
	}
	return key, nil
}

func pbkdf2PRF(oid asn1.ObjectIdentifier) (func() hash.Hash, error) {
	switch {
	case len(oid) == 0, oid.Equal(oidHMACSHA1): // DEFAULT hmacWithSHA1
		return sha1.New, nil
	case oid.Equal(oidHMACSHA224):
		return sha256.New224, nil
	case oid.Equal(oidHMACSHA256):
		return sha256.New, nil
	case oid.Equal(oidHMACSHA384):
		return sha512.New384, nil
	case oid.Equal(oidHMACSHA512):
		return sha512.New, nil
	}
	return nil, unsupported("PBKDF2 PRF", oid)
}

func unsupported(what string, oid asn1.ObjectIdentifier) error {
	name := oid.String()
	if n, ok := unsupportedPBEs[name]; ok {
		name = n + " (" + name + ")"
	}
	return fmt.Errorf("%w: %s %s; Strata reads PBES2 with PBKDF2 (HMAC-SHA1/224/256/384/512) and AES-128/192/256-CBC or DES-EDE3-CBC, as `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes", ErrKeyAlgorithm, what, name)
}
