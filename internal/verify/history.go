package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// History is everything a run observed, in the form Check reads and
// `--history` writes. Times are nanoseconds since the run started.
type History struct {
	// Run is the run's id; every value sent starts with it.
	Run               string `json:"run"`
	Topic             string `json:"topic"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int16  `json:"replication_factor"`
	// Sends are the records produced, each with its outcome.
	Sends []Send `json:"sends"`
	// Consumers are the consumers' logs, the final read's last.
	Consumers []Consumer `json:"consumers"`
	// Final is, per partition, what the final read set out to read and
	// whether it got there.
	Final []FinalRead `json:"final"`
	// Warnings are what kept the run from finishing its work (no final
	// read, say), for the report.
	Warnings []string `json:"warnings,omitempty"`

	// Transactional runs: every send belongs to one of Txns, and the
	// consumers read committed records only. OutputTopic is the copy
	// stage's output, Copies its transactions.
	Transactional bool      `json:"transactional,omitempty"`
	Txns          []Txn     `json:"txns,omitempty"`
	OutputTopic   string    `json:"output_topic,omitempty"`
	Copies        []CopyTxn `json:"copies,omitempty"`
}

// Transaction outcomes, as the client saw them. A transaction whose commit
// was never asked for is aborted whatever its EndTxn answered; one whose
// commit was asked for and not confirmed is unknown.
const (
	OutcomeCommitted = "committed"
	OutcomeAborted   = "aborted"
	OutcomeUnknown   = "unknown"
)

// Txn is one transaction of a transactional producer. Its records are the
// Sends with the same Producer and Txn.
type Txn struct {
	Producer int   `json:"producer"`
	ID       int64 `json:"id"`
	// Outcome is OutcomeCommitted, OutcomeAborted or OutcomeUnknown.
	Outcome string `json:"outcome"`
	// EndNanos is when the producer asked to end the transaction (commit
	// or abort): no read_committed consumer may read a record of it
	// before.
	EndNanos int64 `json:"end_ns"`
	// DoneNanos is when the end was answered (or failed).
	DoneNanos int64  `json:"done_ns,omitempty"`
	Error     string `json:"error,omitempty"`
}

// CopyTxn is one transaction of the copy stage: a member of the run's
// group read Inputs (read_committed) from the topic and, in one
// transaction with its offset commit, wrote each to the same partition of
// the output topic as CopyValue(input, Copier, ID).
type CopyTxn struct {
	Copier    int     `json:"copier"`
	ID        int64   `json:"id"`
	Outcome   string  `json:"outcome"`
	EndNanos  int64   `json:"end_ns"`
	DoneNanos int64   `json:"done_ns,omitempty"`
	Inputs    []Input `json:"inputs"`
	Error     string  `json:"error,omitempty"`
}

// Input is a record the copy stage read.
type Input struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
}

// Send is one record a producer sent and what became of it: acknowledged
// (Acked, with the Offset the acknowledgement reported), failed (Error), or
// never answered (neither).
type Send struct {
	Producer  int    `json:"producer"`
	Seq       int64  `json:"seq"`
	Partition int32  `json:"partition"`
	Value     string `json:"value"`
	SentNanos int64  `json:"sent_ns"`
	Acked     bool   `json:"acked"`
	// Offset is the acknowledged offset; -1 unless Acked.
	Offset      int64  `json:"offset"`
	AnswerNanos int64  `json:"answer_ns,omitempty"`
	Error       string `json:"error,omitempty"`
	// Txn is the producer's transaction the record was sent in
	// (transactional runs).
	Txn int64 `json:"txn,omitempty"`
	// ProducerID and ProducerEpoch are what the acknowledged batch
	// carried.
	ProducerID    int64 `json:"pid,omitempty"`
	ProducerEpoch int16 `json:"epoch,omitempty"`
}

// Consumer kinds.
const (
	KindAssigned = "assigned" // partitions assigned directly, read from the start
	KindGroup    = "group"    // a member of the run's consumer group
	KindFinal    = "final"    // the read of everything after producing stopped
	KindCopier   = "copier"   // a member of the copy stage (transactional runs)
)

// Consumer is one consumer's events, in the order it saw them.
type Consumer struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Topic is the topic read; the run's Topic when empty.
	Topic  string  `json:"topic,omitempty"`
	Events []Event `json:"events"`
}

// Event types.
const (
	EventPoll     = "poll"     // a record read: Partition, Offset, Value
	EventAssigned = "assigned" // Partitions were assigned (a new assignment starts)
	EventRevoked  = "revoked"  // Partitions were revoked or lost
	EventError    = "error"    // a fetch failed: Partition, Error
)

// Event is one thing a consumer saw.
type Event struct {
	Type       string  `json:"type"`
	Nanos      int64   `json:"t_ns"`
	Partition  int32   `json:"partition"`
	Offset     int64   `json:"offset"`
	Value      string  `json:"value,omitempty"`
	Partitions []int32 `json:"partitions,omitempty"`
	Error      string  `json:"error,omitempty"`
	// ProducerID and ProducerEpoch are the read record's batch's.
	ProducerID    int64 `json:"pid,omitempty"`
	ProducerEpoch int16 `json:"epoch,omitempty"`
}

// FinalRead is what the final read did with one partition: it read from
// Start (the log start offset then) towards End (the end offset once
// producing had stopped), and Reached says whether it got to End.
type FinalRead struct {
	// Topic is the topic read; the run's Topic when empty.
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	Reached   bool   `json:"reached"`
}

// Value is the record value of a producer's record seq in run: it
// identifies the record across the whole history.
func Value(run string, producer int, seq int64) string {
	return fmt.Sprintf("%s-p%d-%d", run, producer, seq)
}

// CopyValue is the copy stage's output record for input value, written
// by copier in its transaction id.
func CopyValue(input string, copier int, id int64) string {
	return fmt.Sprintf("%s@c%d-%d", input, copier, id)
}

// parseCopy splits a CopyValue; ok is false for anything else.
func parseCopy(v string) (input string, copier int, id int64, ok bool) {
	i := strings.LastIndex(v, "@c")
	if i < 0 {
		return "", 0, 0, false
	}
	if _, err := fmt.Sscanf(v[i+2:], "%d-%d", &copier, &id); err != nil || copier < 0 || id < 0 || CopyValue(v[:i], copier, id) != v {
		return "", 0, 0, false
	}
	return v[:i], copier, id, true
}

// WriteJSON writes the history as one JSON document.
func (h *History) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(h)
}

// WriteFile writes the history as JSON to path.
func (h *History) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("verify: writing the history: %w", err)
	}
	if err := h.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("verify: writing the history to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("verify: writing the history to %s: %w", path, err)
	}
	return nil
}

// ReadHistory reads a history written by WriteJSON.
func ReadHistory(r io.Reader) (*History, error) {
	var h History
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return nil, fmt.Errorf("verify: reading a history: %w", err)
	}
	return &h, nil
}
