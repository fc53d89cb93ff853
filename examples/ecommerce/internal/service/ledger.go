package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Ledger is a service's record of the orders it has acted on, and at the
// same time the visible effect itself: one line per order,
//
//	<order id> <text>\n
//
// appended with a single write. Because the effect and the record of it are
// the same line, a crash cannot leave one without the other: an order is
// either in the ledger (done, skip it when redelivered) or not (do it).
// A real service gets the same property by storing the order id in the
// transaction that makes the effect, or by passing it as the idempotency key
// to the payment or e-mail provider.
//
// A Ledger is safe for concurrent use.
type Ledger struct {
	mu   sync.Mutex
	out  io.Writer
	file *os.File // nil when out is stdout
	done map[string]bool
}

// OpenLedger opens the ledger at path, creating it if needed, and reads back
// the orders already in it. A line cut short by a crash (no trailing
// newline) is truncated away: its effect did not happen. With path "" or
// "-" the ledger writes to stdout and remembers orders only for this run.
func OpenLedger(path string) (*Ledger, error) {
	l := &Ledger{done: map[string]bool{}}
	if path == "" || path == "-" {
		l.out = os.Stdout
		return l, nil
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	complete := data[:bytes.LastIndexByte(data, '\n')+1]
	for _, line := range strings.Split(string(complete), "\n") {
		if id, _, _ := strings.Cut(line, " "); id != "" {
			l.done[id] = true
		}
	}
	if len(complete) < len(data) {
		if err := os.Truncate(path, int64(len(complete))); err != nil {
			return nil, fmt.Errorf("ledger: truncating a torn last line: %w", err)
		}
	}
	// O_APPEND: every line lands at the end even if another process
	// appends to the same file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	l.out, l.file = f, f
	return l, nil
}

// Len is the number of orders in the ledger.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done)
}

// Done reports whether orderID is in the ledger.
func (l *Ledger) Done(orderID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[orderID]
}

// Record appends orderID and text as one line. The order counts as done
// once Record returns nil.
func (l *Ledger) Record(orderID, text string) error {
	if orderID == "" || strings.ContainsAny(orderID, " \n") || strings.Contains(text, "\n") {
		return fmt.Errorf("ledger: order id %q or text %q would not read back as one line", orderID, text)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := io.WriteString(l.out, orderID+" "+text+"\n"); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	l.done[orderID] = true
	return nil
}

// Sync makes what has been recorded survive a machine crash. A consumer
// calls it before committing the offsets of the records it acted on, so a
// committed order is never missing from the ledger after a power loss.
func (l *Ledger) Sync() error {
	if l.file == nil {
		return nil
	}
	if err := l.file.Sync(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Close closes the ledger's file.
func (l *Ledger) Close() error {
	if l.file == nil {
		return nil
	}
	return l.file.Close()
}
