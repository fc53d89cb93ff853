package verify

import (
	"bytes"
	"maps"
	"strings"
	"testing"
)

// Builders for transactional histories: topic "t", output "t-out".

func tsend(producer int, seq, txn int64, partition int32, offset int64) Send {
	s := acked(producer, seq, partition, offset)
	s.Txn = txn
	return s
}

func pollAt(partition int32, offset int64, value string, nanos int64) Event {
	e := poll(partition, offset, value)
	e.Nanos = nanos
	return e
}

func in(partition int32, offset int64, value string) Input {
	return Input{Partition: partition, Offset: offset, Value: value}
}

// txnHistory is a clean run: producer 0's transaction 1 (records at 0
// and 1, its marker at 2) committed, 2 (record at 3, marker at 4)
// aborted, 3 (record at 5, marker at 6) committed; the copy stage copied
// the three committed records in two transactions into output offsets 0,
// 1 (marker 2) and 3 (marker 4). Every read comes after every end.
func txnHistory() *History {
	return &History{
		Run: "r", Topic: "t", Partitions: 1, Transactional: true, OutputTopic: "t-out",
		Sends: []Send{tsend(0, 0, 1, 0, 0), tsend(0, 1, 1, 0, 1), tsend(0, 2, 2, 0, 3), tsend(0, 3, 3, 0, 5)},
		Txns: []Txn{
			{Producer: 0, ID: 1, Outcome: OutcomeCommitted, EndNanos: 100},
			{Producer: 0, ID: 2, Outcome: OutcomeAborted, EndNanos: 200},
			{Producer: 0, ID: 3, Outcome: OutcomeCommitted, EndNanos: 300},
		},
		Copies: []CopyTxn{
			{Copier: 0, ID: 1, Outcome: OutcomeCommitted, EndNanos: 400, Inputs: []Input{in(0, 0, v(0, 0)), in(0, 1, v(0, 1))}},
			{Copier: 0, ID: 2, Outcome: OutcomeCommitted, EndNanos: 500, Inputs: []Input{in(0, 5, v(0, 3))}},
		},
		Consumers: []Consumer{
			consumer("a", assigned(0), pollAt(0, 0, v(0, 0), 1000), pollAt(0, 1, v(0, 1), 1000), pollAt(0, 5, v(0, 3), 1000)),
			{Name: "copier-0", Kind: KindCopier, Events: []Event{assigned(0), pollAt(0, 0, v(0, 0), 350), pollAt(0, 1, v(0, 1), 350), pollAt(0, 5, v(0, 3), 450)}},
			{Name: "final", Kind: KindFinal, Events: []Event{assigned(0), pollAt(0, 0, v(0, 0), 2000), pollAt(0, 1, v(0, 1), 2000), pollAt(0, 5, v(0, 3), 2000)}},
			{Name: "final-output", Kind: KindFinal, Topic: "t-out", Events: []Event{assigned(0),
				pollAt(0, 0, CopyValue(v(0, 0), 0, 1), 2000), pollAt(0, 1, CopyValue(v(0, 1), 0, 1), 2000), pollAt(0, 3, CopyValue(v(0, 3), 0, 2), 2000)}},
		},
		Final: []FinalRead{reached(0, 0, 7), {Topic: "t-out", Partition: 0, Start: 0, End: 5, Reached: true}},
	}
}

func outputPoll(h *History, e Event) {
	for i := range h.Consumers {
		if h.Consumers[i].Topic == "t-out" {
			h.Consumers[i].Events = append(h.Consumers[i].Events, e)
		}
	}
}

func TestCheckTransactional(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(h *History)
		want   map[Kind]int
		// wantText, when set, must appear in the text report.
		wantText      string
		indeterminate int
	}{
		{name: "clean", change: func(*History) {}},
		{
			name: "a record of an aborted transaction read",
			change: func(h *History) {
				h.Consumers[0].Events = append(h.Consumers[0].Events[:3], pollAt(0, 3, v(0, 2), 1000), h.Consumers[0].Events[3])
			},
			want:     map[Kind]int{AbortedRead: 1},
			wantText: `a read "r-p0-2" at partition 0 offset 3 (producer id 0 epoch 0), of producer 0's aborted transaction 2`,
		},
		{
			name: "a record read before its producer asked to commit",
			change: func(h *History) {
				h.Consumers[0].Events[1].Nanos = 40
			},
			want:     map[Kind]int{IntermediateRead: 1},
			wantText: `a read "r-p0-0" at partition 0 offset 0 (producer id 0 epoch 0) 0.0 ms before producer 0 asked to end its transaction 1 (committed)`,
		},
		{
			name: "a committed record the final read passed over",
			change: func(h *History) {
				for i := range 3 {
					h.Consumers[i].Events = slicesDelete(h.Consumers[i].Events, 2)
				}
			},
			// The reader and the final read skipped it.
			want:     map[Kind]int{LostWrite: 1, PollSkip: 2},
			wantText: `"r-p0-1" acknowledged at partition 0 offset 1, never read`,
		},
		{
			name: "a committed record read at two offsets",
			change: func(h *History) {
				h.Consumers[2].Events = append(h.Consumers[2].Events, pollAt(0, 7, v(0, 3), 2000))
			},
			want: map[Kind]int{Duplicate: 1},
		},
		{
			name: "an unknown transaction's records may be read or not",
			change: func(h *History) {
				h.Txns[1].Outcome = OutcomeUnknown
				h.Consumers[0].Events = append(h.Consumers[0].Events[:3], pollAt(0, 3, v(0, 2), 1000), h.Consumers[0].Events[3])
				h.Consumers[2].Events = append(h.Consumers[2].Events[:3], pollAt(0, 3, v(0, 2), 2000), h.Consumers[2].Events[3])
			},
			indeterminate: 1,
		},
		{
			name: "an aborted copy read from the output",
			change: func(h *History) {
				h.Copies = append(h.Copies, CopyTxn{Copier: 1, ID: 1, Outcome: OutcomeAborted, EndNanos: 600, Inputs: []Input{in(0, 5, v(0, 3))}})
				outputPoll(h, pollAt(0, 5, CopyValue(v(0, 3), 1, 1), 2000))
			},
			want:     map[Kind]int{AbortedRead: 1},
			wantText: "of copier 1's aborted transaction 1",
		},
		{
			name: "an input copied by two committed transactions",
			change: func(h *History) {
				h.Copies = append(h.Copies, CopyTxn{Copier: 1, ID: 1, Outcome: OutcomeCommitted, EndNanos: 600, Inputs: []Input{in(0, 5, v(0, 3))}})
				outputPoll(h, pollAt(0, 5, CopyValue(v(0, 3), 1, 1), 2000))
			},
			want:     map[Kind]int{Duplicate: 1, NonmonotonicCopy: 1},
			wantText: `input "r-p0-3" (partition 0) copied 2 times`,
		},
		{
			name: "an input copied by an unknown transaction too, both read",
			change: func(h *History) {
				h.Copies = append(h.Copies, CopyTxn{Copier: 1, ID: 1, Outcome: OutcomeUnknown, EndNanos: 600, Inputs: []Input{in(0, 1, v(0, 1))}})
				outputPoll(h, pollAt(0, 5, CopyValue(v(0, 1), 1, 1), 2000))
			},
			want: map[Kind]int{Duplicate: 1, NonmonotonicCopy: 1},
		},
		{
			name: "a committed input the copy stage skipped",
			change: func(h *History) {
				h.Copies[0].Inputs = h.Copies[0].Inputs[:1]
				h.Consumers[3].Events = slicesDelete(h.Consumers[3].Events, 2)
			},
			want:     map[Kind]int{LostWrite: 1},
			wantText: "never copied, though the copy stage committed copies up to offset 5",
		},
		{
			name: "a committed copy the output's final read did not find",
			change: func(h *History) {
				h.Consumers[3].Events = h.Consumers[3].Events[:3]
			},
			want:     map[Kind]int{LostWrite: 1},
			wantText: `"r-p0-3@c0-2" of copier 0's committed transaction 2 never read`,
		},
		{
			name: "copies out of their inputs' order",
			change: func(h *History) {
				ev := h.Consumers[3].Events
				ev[1].Offset, ev[3].Offset = 3, 0
			},
			want: map[Kind]int{NonmonotonicCopy: 2},
		},
		{
			name: "a copy read before its transaction asked to commit",
			change: func(h *History) {
				outputPoll(h, pollAt(0, 0, CopyValue(v(0, 0), 0, 1), 390))
			},
			want: map[Kind]int{IntermediateRead: 1},
		},
		{
			name: "a copy no copy transaction made",
			change: func(h *History) {
				outputPoll(h, pollAt(0, 5, CopyValue(v(0, 0), 7, 7), 2000))
			},
			want: map[Kind]int{UnexpectedValue: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := txnHistory()
			tc.change(h)
			res := Check(h)
			got := map[Kind]int{}
			for _, a := range res.Anomalies {
				if a.Count > 0 {
					got[a.Kind] = a.Count
				}
			}
			want := tc.want
			if want == nil {
				want = map[Kind]int{}
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, want) {
				t.Errorf("anomalies %v, want %v\n%s", got, want, text.String())
			}
			if res.Stats.Indeterminate != tc.indeterminate {
				t.Errorf("indeterminate %d, want %d", res.Stats.Indeterminate, tc.indeterminate)
			}
			if tc.wantText != "" && !strings.Contains(text.String(), tc.wantText) {
				t.Errorf("report does not say %q:\n%s", tc.wantText, text.String())
			}
			if !strings.Contains(text.String(), "transactions: 2 committed") {
				t.Errorf("report does not count the transactions:\n%s", text.String())
			}
		})
	}
}

func slicesDelete(es []Event, i int) []Event { return append(es[:i:i], es[i+1:]...) }

func TestParseCopy(t *testing.T) {
	for _, v := range []string{"r-p0-1@c2-3", "x@cy@c0-12"} {
		in, copier, id, ok := parseCopy(v)
		if !ok || CopyValue(in, copier, id) != v {
			t.Errorf("parseCopy(%q) = %q, %d, %d, %v", v, in, copier, id, ok)
		}
	}
	for _, v := range []string{"r-p0-1", "r-p0-1@c", "r-p0-1@c2", "r-p0-1@c2-3x", "r-p0-1@c-2-3"} {
		if _, _, _, ok := parseCopy(v); ok {
			t.Errorf("parseCopy(%q) ok", v)
		}
	}
}
