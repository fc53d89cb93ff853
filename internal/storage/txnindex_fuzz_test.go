package storage

import "testing"

// FuzzDecodeTxnIndex reads arbitrary .txnindex bytes: whole entries come
// back, a torn or foreign tail ends them, nothing panics.
func FuzzDecodeTxnIndex(f *testing.F) {
	f.Add(appendAbortedTxn(appendAbortedTxn(nil, AbortedTxn{1, 2, 3, 4}), AbortedTxn{5, 6, 7, 8}))
	f.Add([]byte{0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		es := decodeTxnIndex(data)
		if len(es)*abortedTxnSize > len(data) {
			t.Fatalf("%d entries from %d bytes", len(es), len(data))
		}
		var again []byte
		for _, a := range es {
			again = appendAbortedTxn(again, a)
		}
		if string(again) != string(data[:len(again)]) {
			t.Fatal("entries do not re-encode to the bytes they came from")
		}
	})
}
