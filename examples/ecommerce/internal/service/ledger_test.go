package service

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLedgerReadsBackWhatWasRecorded(t *testing.T) {
	tests := []struct {
		name     string
		existing string // file contents before OpenLedger
		wantDone []string
		wantNot  []string
		wantFile string // after recording ord-new
	}{
		{name: "no file", wantNot: []string{"ord-1"}, wantFile: "ord-new did\n"},
		{
			name:     "complete lines",
			existing: "ord-1 emailed\nord-2 emailed\n",
			wantDone: []string{"ord-1", "ord-2"},
			wantNot:  []string{"ord-3"},
			wantFile: "ord-1 emailed\nord-2 emailed\nord-new did\n",
		},
		{
			name:     "torn last line is not done and is cut off",
			existing: "ord-1 emailed\nord-2 ema",
			wantDone: []string{"ord-1"},
			wantNot:  []string{"ord-2"},
			wantFile: "ord-1 emailed\nord-new did\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.txt")
			if tt.existing != "" {
				if err := os.WriteFile(path, []byte(tt.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l, err := OpenLedger(path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for _, id := range tt.wantDone {
				if !l.Done(id) {
					t.Errorf("Done(%q) = false, want true", id)
				}
			}
			for _, id := range tt.wantNot {
				if l.Done(id) {
					t.Errorf("Done(%q) = true, want false", id)
				}
			}
			if err := l.Record("ord-new", "did"); err != nil {
				t.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if !l.Done("ord-new") {
				t.Error("Done after Record = false")
			}
			if got, _ := os.ReadFile(path); string(got) != tt.wantFile {
				t.Errorf("file = %q, want %q", got, tt.wantFile)
			}
		})
	}
}

func TestLedgerRejectsWhatWouldNotReadBack(t *testing.T) {
	l, err := OpenLedger(filepath.Join(t.TempDir(), "ledger.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct{ id, text string }{{"", "x"}, {"ord 1", "x"}, {"ord-1", "two\nlines"}} {
		if err := l.Record(c.id, c.text); err == nil {
			t.Errorf("Record(%q, %q) = nil, want an error", c.id, c.text)
		}
	}
}
