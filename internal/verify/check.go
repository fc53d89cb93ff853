package verify

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind names an anomaly (see the package doc).
type Kind string

// The anomalies, in the order reports list them.
const (
	LostWrite          Kind = "lost-write"
	Duplicate          Kind = "duplicate"
	InconsistentOffset Kind = "inconsistent-offset"
	NonmonotonicSend   Kind = "nonmonotonic-send"
	NonmonotonicPoll   Kind = "nonmonotonic-poll"
	PollSkip           Kind = "poll-skip"
	UnexpectedValue    Kind = "unexpected-value"
	AbortedRead        Kind = "aborted-read"
	IntermediateRead   Kind = "intermediate-read"
	NonmonotonicCopy   Kind = "nonmonotonic-copy"
)

// Kinds lists every anomaly kind in report order.
var Kinds = []Kind{LostWrite, Duplicate, InconsistentOffset, NonmonotonicSend, NonmonotonicPoll, PollSkip, UnexpectedValue,
	AbortedRead, IntermediateRead, NonmonotonicCopy}

// MaxExamples is how many examples a Result keeps of each anomaly.
const MaxExamples = 5

// Result is Check's verdict.
type Result struct {
	// Valid is true when no anomaly was found.
	Valid             bool      `json:"valid"`
	Topic             string    `json:"topic"`
	Partitions        int32     `json:"partitions"`
	ReplicationFactor int16     `json:"replication_factor"`
	Stats             Stats     `json:"stats"`
	Anomalies         []Anomaly `json:"anomalies"`
	// Warnings are the history's, and what went wrong after the check.
	Warnings []string `json:"warnings,omitempty"`
}

// Anomaly is the count of one kind of anomaly, with a few examples.
type Anomaly struct {
	Kind     Kind      `json:"kind"`
	Count    int       `json:"count"`
	Examples []Example `json:"examples,omitempty"`
}

// Example is one instance of an anomaly.
type Example struct {
	Partition int32    `json:"partition"`
	Offsets   []int64  `json:"offsets,omitempty"`
	Values    []string `json:"values,omitempty"`
	Consumer  string   `json:"consumer,omitempty"`
	// Text says what was seen, for people.
	Text string `json:"text"`
}

// Stats are the run's totals.
type Stats struct {
	Sent         int `json:"sent"`
	Acknowledged int `json:"acknowledged"`
	Failed       int `json:"failed"`
	Unanswered   int `json:"unanswered"`
	// Polled counts records read, by every consumer, repeats included.
	Polled int `json:"polled"`
	// Distinct counts the different values read.
	Distinct int `json:"distinct"`
	// Indeterminate counts records whose send failed or was never
	// answered but that were read: allowed either way.
	Indeterminate int `json:"indeterminate"`
	// Unread counts acknowledged records nobody read that cannot be
	// judged: beyond every offset read, in a partition the final read did
	// not finish.
	Unread int `json:"unread"`
	// FetchErrors counts fetch errors the consumers saw.
	FetchErrors int `json:"fetch_errors"`
	// LongestAckGapMillis is the longest stretch without an answer to a
	// send (acknowledgement or failure) while records were waiting for
	// one, from the first answer on.
	LongestAckGapMillis float64 `json:"longest_ack_gap_ms"`
	// LongestPartitionAckGapMillis is the same, partition by partition,
	// for the partition where it was longest: a fault that stops one
	// partition while the others go on shows here, not above.
	LongestPartitionAckGapMillis float64 `json:"longest_partition_ack_gap_ms"`
	LongestAckGapPartition       int32   `json:"longest_ack_gap_partition"`

	// Transactional runs: the producers' transactions and the copy
	// stage's, by outcome, and the records the copy stage copied in
	// committed transactions (distinct inputs).
	Txns   TxnStats `json:"txns,omitzero"`
	Copies TxnStats `json:"copies,omitzero"`
	Copied int      `json:"copied,omitempty"`
	// LongestEndMillis is the longest a producer's or copier's end of a
	// transaction (EndTxn, and the copier's offset commit) took.
	LongestEndMillis float64 `json:"longest_end_ms,omitempty"`
}

// TxnStats counts transactions by outcome.
type TxnStats struct {
	Committed int `json:"committed"`
	Aborted   int `json:"aborted"`
	Unknown   int `json:"unknown"`
}

func (t *TxnStats) add(outcome string) {
	switch outcome {
	case OutcomeCommitted:
		t.Committed++
	case OutcomeAborted:
		t.Aborted++
	default:
		t.Unknown++
	}
}

// Count is the number of anomalies of kind k.
func (r *Result) Count(k Kind) int {
	for _, a := range r.Anomalies {
		if a.Kind == k {
			return a.Count
		}
	}
	return 0
}

// Total is the number of anomalies of every kind.
func (r *Result) Total() int {
	n := 0
	for _, a := range r.Anomalies {
		n += a.Count
	}
	return n
}

// Summary is "2 lost-write, 1 duplicate" for the kinds found.
func (r *Result) Summary() string {
	var parts []string
	for _, a := range r.Anomalies {
		if a.Count > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", a.Count, a.Kind))
		}
	}
	return strings.Join(parts, ", ")
}

// partitionLog is what was observed of one partition: the values seen at
// each offset and the offsets each value was seen at, from reads and from
// acknowledgements.
type partitionLog struct {
	valuesAt  map[int64][]string // offset -> distinct values, in order seen
	offsetsOf map[string][]int64 // value -> distinct offsets, in order seen
	read      map[string]bool    // values some consumer read
	readAt    map[int64][]string // offset -> distinct values read there
	maxRead   int64              // the highest offset read; -1 if none
	// visible are the offsets a reader must not skip: read somewhere, or
	// acknowledged for a record a reader must see (in a transactional
	// run, only a committed transaction's: read_committed skips the
	// others).
	visible map[int64]bool
	known   []int64 // the visible offsets, sorted
}

func newPartitionLog() *partitionLog {
	return &partitionLog{valuesAt: map[int64][]string{}, offsetsOf: map[string][]int64{}, read: map[string]bool{}, readAt: map[int64][]string{}, maxRead: -1, visible: map[int64]bool{}}
}

func (l *partitionLog) observe(offset int64, value string) {
	if vs := l.valuesAt[offset]; !slices.Contains(vs, value) {
		l.valuesAt[offset] = append(vs, value)
	}
	if os := l.offsetsOf[value]; !slices.Contains(os, offset) {
		l.offsetsOf[value] = append(os, offset)
	}
}

// between counts the offsets with an observation strictly between lo and
// hi.
func (l *partitionLog) between(lo, hi int64) int {
	i := sort.Search(len(l.known), func(i int) bool { return l.known[i] > lo })
	j := sort.Search(len(l.known), func(i int) bool { return l.known[i] >= hi })
	return max(j-i, 0)
}

// checker accumulates a Result.
type checker struct {
	h      *History
	sendOf map[string]*Send
	txnOf  map[txnKey]*Txn
	logs   map[int32]*partitionLog
	found  map[Kind]*Anomaly
}

type txnKey struct {
	producer int
	id       int64
}

// txn is the transaction s was sent in; nil outside transactional runs
// (and for a send whose transaction the history lacks).
func (c *checker) txn(s *Send) *Txn {
	if !c.h.Transactional {
		return nil
	}
	return c.txnOf[txnKey{s.Producer, s.Txn}]
}

// mustBeSeen says whether readers must see s once acknowledged: always,
// but in a transactional run only if its transaction committed.
func (c *checker) mustBeSeen(s *Send) bool {
	if !c.h.Transactional {
		return true
	}
	t := c.txn(s)
	return t != nil && t.Outcome == OutcomeCommitted
}

// readsTopic says whether cons reads the run's topic (not the output).
func (c *checker) readsTopic(cons Consumer) bool {
	return cons.Topic == "" || cons.Topic == c.h.Topic
}

func (c *checker) log(p int32) *partitionLog {
	l := c.logs[p]
	if l == nil {
		l = newPartitionLog()
		c.logs[p] = l
	}
	return l
}

func (c *checker) report(k Kind, ex Example) {
	a := c.found[k]
	a.Count++
	if len(a.Examples) < MaxExamples {
		a.Examples = append(a.Examples, ex)
	}
}

// Check looks for anomalies in a history. It is a pure function of h.
func Check(h *History) *Result {
	c := &checker{h: h, sendOf: map[string]*Send{}, txnOf: map[txnKey]*Txn{}, logs: map[int32]*partitionLog{}, found: map[Kind]*Anomaly{}}
	for _, k := range Kinds {
		c.found[k] = &Anomaly{Kind: k}
	}
	res := &Result{Topic: h.Topic, Partitions: h.Partitions, ReplicationFactor: h.ReplicationFactor, Warnings: slices.Clone(h.Warnings)}
	for i := range h.Txns {
		t := &h.Txns[i]
		c.txnOf[txnKey{t.Producer, t.ID}] = t
		res.Stats.Txns.add(t.Outcome)
		if t.DoneNanos > 0 {
			res.Stats.LongestEndMillis = max(res.Stats.LongestEndMillis, float64(t.DoneNanos-t.EndNanos)/1e6)
		}
	}
	for i := range h.Sends {
		s := &h.Sends[i]
		c.sendOf[s.Value] = s
		res.Stats.Sent++
		switch {
		case s.Acked:
			res.Stats.Acknowledged++
			l := c.log(s.Partition)
			l.observe(s.Offset, s.Value)
			if c.mustBeSeen(s) {
				l.visible[s.Offset] = true
			}
		case s.Error != "":
			res.Stats.Failed++
		default:
			res.Stats.Unanswered++
		}
	}
	distinct := map[string]bool{}
	for _, cons := range h.Consumers {
		if !c.readsTopic(cons) {
			continue // the copy stage's output: checkCopies
		}
		for _, e := range cons.Events {
			switch e.Type {
			case EventError:
				res.Stats.FetchErrors++
				continue
			case EventPoll:
			default:
				continue
			}
			res.Stats.Polled++
			distinct[e.Value] = true
			s := c.sendOf[e.Value]
			if s == nil || s.Partition != e.Partition {
				c.unexpected(cons, e, s)
				continue
			}
			c.checkTxnRead(cons, e)
			l := c.log(e.Partition)
			l.observe(e.Offset, e.Value)
			if t := c.txn(s); t == nil || t.Outcome != OutcomeAborted {
				// An aborted read is reported; others are right to skip
				// its offset.
				l.visible[e.Offset] = true
			}
			l.read[e.Value] = true
			if vs := l.readAt[e.Offset]; !slices.Contains(vs, e.Value) {
				l.readAt[e.Offset] = append(vs, e.Value)
			}
			l.maxRead = max(l.maxRead, e.Offset)
		}
	}
	res.Stats.Distinct = len(distinct)
	for _, l := range c.logs {
		for off := range l.visible {
			l.known = append(l.known, off)
		}
		slices.Sort(l.known)
	}

	c.checkOffsets()
	c.checkSends(&res.Stats)
	c.checkSendOrder()
	for _, cons := range h.Consumers {
		c.checkPolls(cons)
	}
	c.checkCopies(&res.Stats)
	res.Stats.LongestAckGapMillis = float64(longestAckGap(h.Sends)) / float64(time.Millisecond)
	byPartition := map[int32][]Send{}
	for _, s := range h.Sends {
		byPartition[s.Partition] = append(byPartition[s.Partition], s)
	}
	for _, p := range sortedPartitions(byPartition) {
		if gap := float64(longestAckGap(byPartition[p])) / float64(time.Millisecond); gap > res.Stats.LongestPartitionAckGapMillis {
			res.Stats.LongestPartitionAckGapMillis, res.Stats.LongestAckGapPartition = gap, p
		}
	}

	for _, k := range Kinds {
		res.Anomalies = append(res.Anomalies, *c.found[k])
	}
	res.Valid = res.Total() == 0
	return res
}

func (c *checker) unexpected(cons Consumer, e Event, s *Send) {
	text := fmt.Sprintf("%s read %q at partition %d offset %d, a value this run never sent", cons.Name, e.Value, e.Partition, e.Offset)
	if s != nil {
		text = fmt.Sprintf("%s read %q at partition %d offset %d, a value sent to partition %d", cons.Name, e.Value, e.Partition, e.Offset, s.Partition)
	}
	c.report(UnexpectedValue, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name, Text: text})
}

// partitions returns the partitions observed, sorted.
func (c *checker) partitions() []int32 {
	ps := make([]int32, 0, len(c.logs))
	for p := range c.logs {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// checkOffsets finds inconsistent offsets and duplicates.
func (c *checker) checkOffsets() {
	for _, p := range c.partitions() {
		l := c.logs[p]
		for _, off := range l.known {
			if vs := l.valuesAt[off]; len(vs) > 1 {
				c.report(InconsistentOffset, Example{Partition: p, Offsets: []int64{off}, Values: vs,
					Text: fmt.Sprintf("partition %d offset %d holds %s", p, off, c.describeValues(p, off, vs))})
			}
		}
		values := make([]string, 0, len(l.offsetsOf))
		for v, offs := range l.offsetsOf {
			if len(offs) > 1 {
				values = append(values, v)
			}
		}
		slices.SortFunc(values, func(a, b string) int { return cmp.Compare(slices.Min(l.offsetsOf[a]), slices.Min(l.offsetsOf[b])) })
		for _, v := range values {
			offs := slices.Sorted(slices.Values(l.offsetsOf[v]))
			c.report(Duplicate, Example{Partition: p, Offsets: offs, Values: []string{v},
				Text: fmt.Sprintf("partition %d: %q at offsets %s", p, v, joinOffsets(offs))})
		}
	}
}

// describeValues says, for an inconsistent offset, which values were read
// and which acknowledged there.
func (c *checker) describeValues(p int32, off int64, vs []string) string {
	var parts []string
	for _, v := range vs {
		how := "read"
		if s := c.sendOf[v]; s != nil && s.Acked && s.Offset == off && s.Partition == p {
			how = "acknowledged"
			if slices.Contains(c.logs[p].readAt[off], v) {
				how = "acknowledged and read"
			}
		}
		parts = append(parts, fmt.Sprintf("%q (%s)", v, how))
	}
	return strings.Join(parts, " and ")
}

// checkSends finds lost writes and counts indeterminate and unread
// records.
func (c *checker) checkSends(st *Stats) {
	reached := map[int32]FinalRead{}
	for _, f := range c.h.Final {
		if f.Reached && (f.Topic == "" || f.Topic == c.h.Topic) {
			reached[f.Partition] = f
		}
	}
	for i := range c.h.Sends {
		s := &c.h.Sends[i]
		l := c.log(s.Partition)
		read := l.read[s.Value]
		switch {
		case !s.Acked:
			if read {
				st.Indeterminate++
			}
		case c.h.Transactional && !c.mustBeSeen(s):
			// Aborted: a read is an aborted read (checkTxnRead).
			// Unknown: either way is allowed.
			if t := c.txn(s); read && (t == nil || t.Outcome != OutcomeAborted) {
				st.Indeterminate++
			}
		case read:
		case s.Offset <= l.maxRead:
			c.report(LostWrite, Example{Partition: s.Partition, Offsets: []int64{s.Offset}, Values: []string{s.Value},
				Text: fmt.Sprintf("%q acknowledged at partition %d offset %d, never read, though the partition was read up to offset %d", s.Value, s.Partition, s.Offset, l.maxRead)})
		default:
			f, ok := reached[s.Partition]
			if !ok {
				st.Unread++
				continue
			}
			c.report(LostWrite, Example{Partition: s.Partition, Offsets: []int64{s.Offset}, Values: []string{s.Value},
				Text: fmt.Sprintf("%q acknowledged at partition %d offset %d, never read, though the final read read the partition from offset %d to its end at %d", s.Value, s.Partition, s.Offset, f.Start, f.End)})
		}
	}
}

// position is where a producer's record is in its partition's log: the
// acknowledged offset, or else the lowest offset it was read at.
func (c *checker) position(s *Send) (int64, bool) {
	if s.Acked {
		return s.Offset, true
	}
	offs := c.log(s.Partition).offsetsOf[s.Value]
	if len(offs) == 0 {
		return 0, false
	}
	return slices.Min(offs), true
}

// checkSendOrder finds records a producer sent after another to the same
// partition that sit at or below it in the log.
func (c *checker) checkSendOrder() {
	type stream struct {
		producer  int
		partition int32
	}
	byStream := map[stream][]*Send{}
	for i := range c.h.Sends {
		s := &c.h.Sends[i]
		k := stream{s.Producer, s.Partition}
		byStream[k] = append(byStream[k], s)
	}
	keys := make([]stream, 0, len(byStream))
	for k := range byStream {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b stream) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.producer, b.producer))
	})
	for _, k := range keys {
		sends := byStream[k]
		slices.SortFunc(sends, func(a, b *Send) int { return cmp.Compare(a.Seq, b.Seq) })
		var prev *Send
		var prevPos int64
		for _, s := range sends {
			pos, ok := c.position(s)
			if !ok {
				continue
			}
			if prev != nil && pos <= prevPos {
				c.report(NonmonotonicSend, Example{Partition: k.partition, Offsets: []int64{prevPos, pos}, Values: []string{prev.Value, s.Value},
					Text: fmt.Sprintf("producer %d sent %q (offset %d) after %q (offset %d) to partition %d", k.producer, s.Value, pos, prev.Value, prevPos, k.partition)})
			}
			prev, prevPos = s, pos
		}
	}
}

// checkPolls finds a consumer's nonmonotonic polls and skips, each
// assignment of a partition on its own.
func (c *checker) checkPolls(cons Consumer) {
	if !c.readsTopic(cons) || cons.Kind == KindCopier {
		// A copier rewinds to its group's committed offsets whenever a
		// copy transaction aborts: it may read again what it read.
		return
	}
	last := map[int32]int64{} // partition -> last offset read in this assignment
	for _, e := range cons.Events {
		switch e.Type {
		case EventAssigned, EventRevoked:
			for _, p := range e.Partitions {
				delete(last, p)
			}
			continue
		case EventPoll:
		default:
			continue
		}
		if s := c.sendOf[e.Value]; s == nil || s.Partition != e.Partition {
			continue // reported as unexpected
		}
		prev, ok := last[e.Partition]
		last[e.Partition] = e.Offset
		if !ok {
			continue
		}
		if e.Offset <= prev {
			c.report(NonmonotonicPoll, Example{Partition: e.Partition, Offsets: []int64{prev, e.Offset}, Consumer: cons.Name,
				Text: fmt.Sprintf("%s read partition %d offset %d after offset %d", cons.Name, e.Partition, e.Offset, prev)})
			continue
		}
		if n := c.logs[e.Partition].between(prev, e.Offset); n > 0 {
			c.report(PollSkip, Example{Partition: e.Partition, Offsets: []int64{prev, e.Offset}, Consumer: cons.Name,
				Text: fmt.Sprintf("%s read partition %d offset %d right after offset %d, skipping %d offset(s) others saw", cons.Name, e.Partition, e.Offset, prev, n)})
		}
	}
}

// longestAckGap is the longest time without an answer (acknowledgement or
// failure) while some sent record awaited one, from the first answer on
// (before it, the clients are still connecting). Before each answer, the
// wait began at the previous answer or, if nothing was outstanding then,
// at the earliest send among the records answered from then on.
func longestAckGap(sends []Send) time.Duration {
	type span struct{ sent, answered int64 }
	var spans []span
	for _, s := range sends {
		if s.AnswerNanos > 0 {
			spans = append(spans, span{s.SentNanos, s.AnswerNanos})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.answered, b.answered) })
	// minSent[i] is the earliest send among spans[i:].
	minSent := make([]int64, len(spans)+1)
	minSent[len(spans)] = 1<<63 - 1
	for i := len(spans) - 1; i >= 0; i-- {
		minSent[i] = min(minSent[i+1], spans[i].sent)
	}
	var longest int64
	for i := 1; i < len(spans); i++ {
		if gap := spans[i].answered - max(spans[i-1].answered, minSent[i]); gap > longest {
			longest = gap
		}
	}
	return time.Duration(longest)
}

func joinOffsets(offs []int64) string {
	s := make([]string, len(offs))
	for i, o := range offs {
		s[i] = fmt.Sprint(o)
	}
	return strings.Join(s, ", ")
}
