package verify

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"
)

// Small builders for hand-made histories. Values are Value("r", producer,
// seq); v(p, s) is producer p's record s.

func v(producer int, seq int64) string { return Value("r", producer, seq) }

func acked(producer int, seq int64, partition int32, offset int64) Send {
	return Send{Producer: producer, Seq: seq, Partition: partition, Value: v(producer, seq), Acked: true, Offset: offset}
}

func failed(producer int, seq int64, partition int32) Send {
	return Send{Producer: producer, Seq: seq, Partition: partition, Value: v(producer, seq), Offset: -1, Error: "NOT_ENOUGH_REPLICAS"}
}

func unanswered(producer int, seq int64, partition int32) Send {
	return Send{Producer: producer, Seq: seq, Partition: partition, Value: v(producer, seq), Offset: -1}
}

func poll(partition int32, offset int64, value string) Event {
	return Event{Type: EventPoll, Partition: partition, Offset: offset, Value: value}
}

func assigned(ps ...int32) Event { return Event{Type: EventAssigned, Partitions: ps} }
func revoked(ps ...int32) Event  { return Event{Type: EventRevoked, Partitions: ps} }

func consumer(name string, events ...Event) Consumer {
	return Consumer{Name: name, Kind: KindAssigned, Events: events}
}

func reached(partition int32, start, end int64) FinalRead {
	return FinalRead{Partition: partition, Start: start, End: end, Reached: true}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sends     []Send
		consumers []Consumer
		final     []FinalRead
		want      map[Kind]int
		// wantText, when set, must appear in the text report.
		wantText      string
		indeterminate int
		unread        int
	}{
		{
			name:  "clean",
			sends: []Send{acked(0, 0, 0, 0), acked(1, 0, 0, 1), acked(0, 1, 1, 0), acked(1, 1, 1, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{
				consumer("a", assigned(0, 1), poll(0, 0, v(0, 0)), poll(1, 0, v(0, 1)), poll(0, 1, v(1, 0)), poll(1, 1, v(1, 1)), poll(0, 2, v(0, 2))),
				consumer("g", assigned(1), poll(1, 1, v(1, 1)), revoked(1), assigned(0), poll(0, 1, v(1, 0))),
			},
			final: []FinalRead{reached(0, 0, 3), reached(1, 0, 2)},
		},
		{
			name:      "lost write below the highest offset read, and the skip over it",
			sends:     []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{consumer("a", poll(0, 0, v(0, 0)), poll(0, 2, v(0, 2)))},
			want:      map[Kind]int{LostWrite: 1, PollSkip: 1},
			wantText:  `"r-p0-1" acknowledged at partition 0 offset 1, never read, though the partition was read up to offset 2`,
		},
		{
			name:      "lost write beyond what the final read found at the end",
			sends:     []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{consumer("final", poll(0, 0, v(0, 0)), poll(0, 1, v(0, 1)))},
			final:     []FinalRead{reached(0, 0, 2)},
			want:      map[Kind]int{LostWrite: 1},
			wantText:  "never read, though the final read read the partition from offset 0 to its end at 2",
		},
		{
			name:      "lost write below the log start the final read began at",
			sends:     []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1)},
			consumers: []Consumer{consumer("final")},
			final:     []FinalRead{reached(0, 2, 2)},
			want:      map[Kind]int{LostWrite: 2},
		},
		{
			name:      "unread beyond every read when the final read did not finish",
			sends:     []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{consumer("a", poll(0, 0, v(0, 0)))},
			final:     []FinalRead{{Partition: 0, Start: 0, End: 3}},
			unread:    2,
		},
		{
			name:  "duplicate: a retry appended twice",
			sends: []Send{acked(0, 0, 0, 1), acked(0, 1, 0, 2)},
			consumers: []Consumer{
				consumer("a", poll(0, 0, v(0, 0)), poll(0, 1, v(0, 0)), poll(0, 2, v(0, 1))),
			},
			want:     map[Kind]int{Duplicate: 1},
			wantText: `partition 0: "r-p0-0" at offsets 0, 1`,
		},
		{
			name:  "inconsistent offset: two readers disagree",
			sends: []Send{acked(0, 0, 0, 0), failed(1, 0, 0)},
			consumers: []Consumer{
				consumer("a", poll(0, 0, v(0, 0))),
				consumer("b", poll(0, 0, v(1, 0))),
			},
			want:          map[Kind]int{InconsistentOffset: 1},
			indeterminate: 1,
			wantText:      `partition 0 offset 0 holds "r-p0-0" (acknowledged and read) and "r-p1-0" (read)`,
		},
		{
			name:          "inconsistent offset: acknowledged where another value was read, and so lost",
			sends:         []Send{acked(0, 0, 0, 0), unanswered(1, 0, 0)},
			consumers:     []Consumer{consumer("a", poll(0, 0, v(1, 0)))},
			want:          map[Kind]int{InconsistentOffset: 1, LostWrite: 1},
			indeterminate: 1,
			wantText:      `"r-p0-0" (acknowledged) and "r-p1-0" (read)`,
		},
		{
			name:      "nonmonotonic send: a later record below an earlier one",
			sends:     []Send{acked(0, 0, 0, 5), acked(0, 1, 0, 3)},
			consumers: []Consumer{consumer("a", poll(0, 3, v(0, 1)), poll(0, 5, v(0, 0)))},
			want:      map[Kind]int{NonmonotonicSend: 1},
			wantText:  `producer 0 sent "r-p0-1" (offset 3) after "r-p0-0" (offset 5) to partition 0`,
		},
		{
			name:          "nonmonotonic send, placing an unanswered record where it was read",
			sends:         []Send{unanswered(0, 0, 0), acked(0, 1, 0, 6)},
			consumers:     []Consumer{consumer("a", poll(0, 6, v(0, 1)), poll(0, 7, v(0, 0)))},
			want:          map[Kind]int{NonmonotonicSend: 1},
			indeterminate: 1,
		},
		{
			name:  "order is per partition: interleaving across partitions is fine",
			sends: []Send{acked(0, 0, 0, 5), acked(0, 1, 1, 0), acked(0, 2, 0, 6)},
			consumers: []Consumer{
				consumer("a", poll(0, 5, v(0, 0)), poll(1, 0, v(0, 1)), poll(0, 6, v(0, 2))),
			},
		},
		{
			name:  "nonmonotonic poll within one assignment, not across assignments",
			sends: []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{
				consumer("a", poll(0, 0, v(0, 0)), poll(0, 1, v(0, 1)), poll(0, 2, v(0, 2)), poll(0, 1, v(0, 1))),
				consumer("g", assigned(0), poll(0, 0, v(0, 0)), poll(0, 1, v(0, 1)), revoked(0), assigned(0), poll(0, 0, v(0, 0))),
			},
			want:     map[Kind]int{NonmonotonicPoll: 1},
			wantText: "a read partition 0 offset 1 after offset 2",
		},
		{
			name:      "reading one offset twice in a row is nonmonotonic",
			sends:     []Send{acked(0, 0, 0, 0)},
			consumers: []Consumer{consumer("a", poll(0, 0, v(0, 0)), poll(0, 0, v(0, 0)))},
			want:      map[Kind]int{NonmonotonicPoll: 1},
		},
		{
			name:      "a gap nobody observed is not a skip",
			sends:     []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 5)},
			consumers: []Consumer{consumer("a", poll(0, 0, v(0, 0)), poll(0, 5, v(0, 1)))},
		},
		{
			name:  "a skip over offsets another consumer read",
			sends: []Send{acked(0, 0, 0, 0), failed(0, 1, 0), failed(0, 2, 0), acked(0, 3, 0, 3)},
			consumers: []Consumer{
				consumer("a", poll(0, 0, v(0, 0)), poll(0, 3, v(0, 3))),
				consumer("b", poll(0, 0, v(0, 0)), poll(0, 1, v(0, 1)), poll(0, 2, v(0, 2)), poll(0, 3, v(0, 3))),
			},
			want:          map[Kind]int{PollSkip: 1},
			indeterminate: 2,
			wantText:      "a read partition 0 offset 3 right after offset 0, skipping 2 offset(s) others saw",
		},
		{
			name:  "no skip across a rebalance: the consumer was not assigned what it missed",
			sends: []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), acked(0, 2, 0, 2)},
			consumers: []Consumer{
				consumer("g1", assigned(0), poll(0, 0, v(0, 0)), revoked(0), assigned(0), poll(0, 2, v(0, 2))),
				consumer("g2", assigned(0), poll(0, 1, v(0, 1)), revoked(0)),
			},
		},
		{
			name:  "unexpected values: never sent, or sent elsewhere",
			sends: []Send{acked(0, 0, 0, 0), acked(0, 1, 1, 0)},
			consumers: []Consumer{
				consumer("a", poll(0, 0, v(0, 0)), poll(0, 1, "garbage"), poll(1, 0, v(0, 1)), poll(0, 2, v(0, 1))),
			},
			want:     map[Kind]int{UnexpectedValue: 2},
			wantText: `a read "r-p0-1" at partition 0 offset 2, a value sent to partition 1`,
		},
		{
			name:          "failed but read is indeterminate, not an anomaly",
			sends:         []Send{failed(0, 0, 0), unanswered(0, 1, 0), failed(0, 2, 0)},
			consumers:     []Consumer{consumer("a", poll(0, 0, v(0, 0)), poll(0, 1, v(0, 1)))},
			final:         []FinalRead{reached(0, 0, 2)},
			indeterminate: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Run: "r", Topic: "t", Partitions: 2, Sends: tc.sends, Consumers: tc.consumers, Final: tc.final}
			res := Check(h)
			got := map[Kind]int{}
			for _, a := range res.Anomalies {
				if a.Count > 0 {
					got[a.Kind] = a.Count
				}
				if len(a.Examples) != min(a.Count, MaxExamples) {
					t.Errorf("%s: %d examples of %d", a.Kind, len(a.Examples), a.Count)
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
			if res.Valid != (len(want) == 0) {
				t.Errorf("valid %v with anomalies %v", res.Valid, got)
			}
			if res.Stats.Indeterminate != tc.indeterminate || res.Stats.Unread != tc.unread {
				t.Errorf("indeterminate %d, unread %d; want %d, %d", res.Stats.Indeterminate, res.Stats.Unread, tc.indeterminate, tc.unread)
			}
			if tc.wantText != "" && !strings.Contains(text.String(), tc.wantText) {
				t.Errorf("report does not say %q:\n%s", tc.wantText, text.String())
			}
			verdict := "VALID: no anomalies"
			if !res.Valid {
				verdict = "INVALID: " + res.Summary()
			}
			if !strings.HasSuffix(strings.TrimSpace(text.String()), verdict) {
				t.Errorf("report does not end with %q:\n%s", verdict, text.String())
			}
		})
	}
}

func TestCheckStats(t *testing.T) {
	h := &History{
		Sends: []Send{acked(0, 0, 0, 0), acked(0, 1, 0, 1), failed(0, 2, 0), unanswered(0, 3, 0)},
		Consumers: []Consumer{
			consumer("a", poll(0, 0, v(0, 0)), Event{Type: EventError, Partition: 0, Error: "NOT_LEADER_OR_FOLLOWER"}, poll(0, 1, v(0, 1))),
			consumer("b", poll(0, 0, v(0, 0))),
		},
	}
	st := Check(h).Stats
	want := Stats{Sent: 4, Acknowledged: 2, Failed: 1, Unanswered: 1, Polled: 3, Distinct: 2, FetchErrors: 1}
	if st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}

// TestCheckExamplesBounded: a thousand anomalies keep MaxExamples
// examples, the first ones by offset.
func TestCheckExamplesBounded(t *testing.T) {
	var sends []Send
	var polls []Event
	for i := range int64(1000) {
		sends = append(sends, acked(0, i, 0, 2*i))
		polls = append(polls, poll(0, 2*i, v(0, i)), poll(0, 2*i+1, v(0, i)))
	}
	res := Check(&History{Sends: sends, Consumers: []Consumer{consumer("a", polls...)}})
	if res.Count(Duplicate) != 1000 || res.Total() != 1000 {
		t.Fatalf("%s, want 1000 duplicates", res.Summary())
	}
	ex := res.Anomalies[1].Examples
	if len(ex) != MaxExamples || ex[0].Offsets[0] != 0 || ex[MaxExamples-1].Offsets[0] != 2*(MaxExamples-1) {
		t.Fatalf("examples %+v", ex)
	}
}

func TestLongestAckGap(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name  string
		spans [][2]int64 // sent, answered (ms)
		want  int64
	}{
		{"none", nil, 0},
		{"the wait for the first answer is start-up, not a gap", [][2]int64{{0, 10}}, 0},
		{"idle time between records is no gap", [][2]int64{{0, 10}, {50, 55}, {60, 62}}, 5},
		{"a slow record behind fast ones", [][2]int64{{0, 5}, {6, 100}, {10, 20}}, 80},
		{"overlapping", [][2]int64{{0, 5}, {1, 30}, {2, 31}, {32, 40}}, 25},
		{"unanswered records are left out", [][2]int64{{0, 10}, {5, 0}, {11, 12}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sends []Send
			for _, s := range tc.spans {
				sends = append(sends, Send{SentNanos: s[0] * ms, AnswerNanos: s[1] * ms})
			}
			if got := longestAckGap(sends); got != time.Duration(tc.want*ms) {
				t.Fatalf("longest gap %v, want %v", got, time.Duration(tc.want*ms))
			}
		})
	}
}

// TestLongestPartitionAckGap: one partition stalled while another answered
// throughout shows as a gap of that partition, not of the run.
func TestLongestPartitionAckGap(t *testing.T) {
	ms := int64(time.Millisecond)
	var sends []Send
	for i := range int64(20) {
		sends = append(sends, Send{Partition: 1, SentNanos: i * 10 * ms, AnswerNanos: (i*10 + 2) * ms})
	}
	sends = append(sends, Send{Partition: 0, SentNanos: 0, AnswerNanos: 5 * ms}, Send{Partition: 0, SentNanos: 10 * ms, AnswerNanos: 150 * ms})
	st := Check(&History{Partitions: 2, Sends: sends}).Stats
	if st.LongestAckGapMillis > 10 || st.LongestPartitionAckGapMillis != 140 || st.LongestAckGapPartition != 0 {
		t.Fatalf("gaps: run %v ms, partition %d %v ms; want at most 10, partition 0 140", st.LongestAckGapMillis, st.LongestAckGapPartition, st.LongestPartitionAckGapMillis)
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	h := &History{Run: "r", Topic: "t", Partitions: 1, Sends: []Send{acked(0, 0, 0, 0)},
		Consumers: []Consumer{consumer("a", assigned(0), poll(0, 0, v(0, 0)))}, Final: []FinalRead{reached(0, 0, 1)}}
	var b bytes.Buffer
	if err := h.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	back, err := ReadHistory(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !Check(back).Valid || back.Consumers[0].Events[1].Value != v(0, 0) || !back.Final[0].Reached {
		t.Fatalf("history did not survive JSON: %+v", back)
	}
	if _, err := ReadHistory(strings.NewReader("{")); err == nil {
		t.Fatal("truncated JSON: no error")
	}
}
