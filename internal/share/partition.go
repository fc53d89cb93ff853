package share

import (
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
)

// record is the state of a run of offsets.
type record struct {
	state      DeliveryState
	count      int16  // deliveries so far
	member     string // the holder while Acquired
	deadlineMs int64  // lock expiry while Acquired
}

// durable is the state a record is written as: an acquired record returns
// to AVAILABLE after a failover.
func (r record) durable() (DeliveryState, int16) {
	if r.state == Acquired {
		return Available, r.count
	}
	return r.state, r.count
}

func (r record) durableEqual(o record) bool {
	s1, n1 := r.durable()
	s2, n2 := o.durable()
	return s1 == s2 && n1 == n2
}

// span is a run of in-flight offsets in one state: a fetched batch, or
// the part of one that a split left in one state.
type span struct {
	first, last int64
	record
}

// Partition is the in-flight state of one share-partition. It is not safe
// for concurrent use; its owner serializes inputs. Every method that
// changes durable state returns the Write that records it, nil if none.
type Partition struct {
	cfg         Config
	stateEpoch  int32
	leaderEpoch int32
	start       int64 // SPSO
	end         int64 // SPEO; start-1 when nothing is in flight
	// spans cover [start, end] in order, without gaps or overlaps; at
	// most end-start+1 of them, adjacent ones in different states.
	spans []span
}

// Initialize starts a share-partition at offset start (where
// share.auto.offset.reset put it) at the given state epoch, and returns
// the snapshot to write (InitializeShareGroupState).
func Initialize(cfg Config, stateEpoch, leaderEpoch int32, start int64) (*Partition, *Write) {
	p := &Partition{cfg: cfg, stateEpoch: stateEpoch, leaderEpoch: leaderEpoch, start: start, end: start - 1}
	return p, p.snapshot()
}

// Recover rebuilds a share-partition led at leaderEpoch from its durable
// state, as read from the share coordinator. Offsets between the start
// and the last state batch that no batch covers are AVAILABLE, never
// delivered; records that were acquired are AVAILABLE with their delivery
// counts.
func Recover(cfg Config, leaderEpoch int32, st *State) *Partition {
	p := &Partition{cfg: cfg, stateEpoch: st.StateEpoch, leaderEpoch: leaderEpoch, start: st.StartOffset, end: st.StartOffset - 1}
	for _, b := range st.Batches {
		if b.LastOffset < p.start || b.FirstOffset <= p.end {
			continue // State keeps batches sorted and above the start; be safe
		}
		first := max(b.FirstOffset, p.start)
		if first > p.end+1 {
			p.spans = append(p.spans, span{first: p.end + 1, last: first - 1})
		}
		s := b.DeliveryState
		if s == Acquired {
			s = Available
		}
		p.spans = append(p.spans, span{first: first, last: b.LastOffset, record: record{state: s, count: b.DeliveryCount}})
		p.end = b.LastOffset
	}
	p.coalesce()
	return p
}

// StartOffset is the SPSO.
func (p *Partition) StartOffset() int64 { return p.start }

// EndOffset is the SPEO; StartOffset-1 when nothing is in flight.
func (p *Partition) EndOffset() int64 { return p.end }

// StateEpoch is the state epoch, raised by Reset.
func (p *Partition) StateEpoch() int32 { return p.stateEpoch }

// FetchOffset is where the next acquisition reads the log from: the
// lowest AVAILABLE in-flight offset, or the end of the in-flight window.
func (p *Partition) FetchOffset() int64 {
	for _, s := range p.spans {
		if s.state == Available {
			return s.first
		}
	}
	return p.end + 1
}

// NextDeadline is the earliest lock expiry of an acquired record; ok is
// false when no record is acquired. The owner calls Tick once it is due.
func (p *Partition) NextDeadline() (deadlineMs int64, ok bool) {
	for _, s := range p.spans {
		if s.state == Acquired && (!ok || s.deadlineMs < deadlineMs) {
			deadlineMs, ok = s.deadlineMs, true
		}
	}
	return deadlineMs, ok
}

// Acquire acquires for member up to maxRecords records of the batches
// read from the log (in offset order), locked until nowMs plus the lock
// duration: AVAILABLE in-flight records first, then records past the end
// while the in-flight window stays within the max record locks. Control
// batches, and with read_committed the aborted transactions' batches, are
// archived without delivery. The Write must be committed before the
// acquired records are returned.
func (p *Partition) Acquire(member string, maxRecords int, batches []LogBatch, aborted []AbortedTransaction, nowMs int64) ([]AcquiredRecords, *Write) {
	skip := p.skipped(batches, aborted)
	budget := int64(maxRecords)
	var got []AcquiredRecords
	c := p.changes()
	held := record{state: Acquired, member: member, deadlineMs: nowMs + p.cfg.LockDurationMs}
	for i, b := range batches {
		if budget <= 0 {
			break
		}
		if b.FirstOffset > b.LastOffset || b.LastOffset < p.start {
			continue
		}
		lo := max(b.FirstOffset, p.start)
		// In flight already: deliver what is AVAILABLE again.
		for off := lo; off <= min(b.LastOffset, p.end) && budget > 0; {
			s := p.spans[p.find(off)]
			hi := min(s.last, b.LastOffset)
			switch {
			case s.state != Available:
			case skip[i]:
				c.set(p, off, hi, record{state: Archived, count: s.count})
			case s.count >= p.cfg.DeliveryCountLimit:
				c.set(p, off, hi, record{state: Archived, count: s.count})
			default:
				hi = off + min(hi-off, budget-1) // never overflows
				r := held
				r.count = s.count + 1
				c.set(p, off, hi, r)
				got = appendAcquired(got, off, hi, r.count)
				budget -= hi - off + 1
			}
			off = hi + 1
		}
		// Past the end: new in-flight records, within the lock bound.
		if b.LastOffset <= p.end || budget <= 0 {
			continue
		}
		lo = max(lo, p.end+1)
		limit := p.start + min(max(p.cfg.MaxRecordLocks, 0), math.MaxInt64-p.start) - 1
		if lo > limit {
			break
		}
		if gap := p.end + 1; lo > gap { // a gap in the log (compaction): nothing to deliver
			p.appendSpan(span{first: gap, last: lo - 1, record: record{state: Archived}})
			c.add(gap, lo-1)
		}
		hi := min(b.LastOffset, limit)
		if skip[i] {
			p.appendSpan(span{first: lo, last: hi, record: record{state: Archived}})
			c.add(lo, hi)
			continue
		}
		hi = lo + min(hi-lo, budget-1)
		r := held
		r.count = 1
		p.appendSpan(span{first: lo, last: hi, record: r})
		c.add(lo, hi)
		got = appendAcquired(got, lo, hi, 1)
		budget -= hi - lo + 1
	}
	return got, c.finish(p)
}

// skipped marks the batches that are never delivered: control batches,
// and with read_committed the batches of aborted transactions.
func (p *Partition) skipped(batches []LogBatch, aborted []AbortedTransaction) []bool {
	skip := make([]bool, len(batches))
	if !p.cfg.ReadCommitted {
		for i, b := range batches {
			skip[i] = b.Control
		}
		return skip
	}
	pending := append([]AbortedTransaction(nil), aborted...)
	sort.Slice(pending, func(i, j int) bool { return pending[i].FirstOffset < pending[j].FirstOffset })
	open := map[int64]bool{} // producers inside an aborted transaction
	for i, b := range batches {
		for len(pending) > 0 && pending[0].FirstOffset <= b.LastOffset {
			open[pending[0].ProducerID] = true
			pending = pending[1:]
		}
		switch {
		case b.Control:
			skip[i] = true
			delete(open, b.ProducerID) // the marker ends the transaction
		case b.Transactional && open[b.ProducerID]:
			skip[i] = true
		}
	}
	return skip
}

func appendAcquired(got []AcquiredRecords, first, last int64, count int16) []AcquiredRecords {
	if n := len(got); n > 0 && got[n-1].LastOffset+1 == first && got[n-1].DeliveryCount == count {
		got[n-1].LastOffset = last
		return got
	}
	return append(got, AcquiredRecords{FirstOffset: first, LastOffset: last, DeliveryCount: count})
}

// Acknowledge applies member's acknowledgements, all or none. It returns
// INVALID_REQUEST for a malformed batch (first after last, a types array
// of the wrong length, an unknown type, batches out of order) and
// INVALID_RECORD_STATE when an offset is not in flight or not acquired by
// member (its lock expired, or another member holds it).
func (p *Partition) Acknowledge(member string, acks []AckBatch) (*Write, error) {
	prev := int64(math.MinInt64)
	for _, a := range acks {
		if a.FirstOffset > a.LastOffset || a.FirstOffset <= prev || len(a.Types) == 0 {
			return nil, kerr.InvalidRequest
		}
		prev = a.LastOffset
		for _, t := range a.Types {
			if t < AckGap || t > AckReject {
				return nil, kerr.InvalidRequest
			}
		}
		if a.FirstOffset < p.start || a.LastOffset > p.end {
			return nil, kerr.InvalidRecordState
		}
		if len(a.Types) > 1 && int64(len(a.Types)) != a.LastOffset-a.FirstOffset+1 {
			return nil, kerr.InvalidRequest
		}
		for off := a.FirstOffset; off <= a.LastOffset; {
			s := p.spans[p.find(off)]
			if s.state != Acquired || s.member != member {
				return nil, kerr.InvalidRecordState
			}
			off = s.last + 1
		}
	}
	c := p.changes()
	for _, a := range acks {
		if len(a.Types) == 1 {
			p.ackRange(c, a.FirstOffset, a.LastOffset, a.Types[0])
			continue
		}
		for i := 0; i < len(a.Types); {
			j := i
			for j+1 < len(a.Types) && a.Types[j+1] == a.Types[i] {
				j++
			}
			p.ackRange(c, a.FirstOffset+int64(i), a.FirstOffset+int64(j), a.Types[i])
			i = j + 1
		}
	}
	return c.finish(p), nil
}

// ackRange applies one type to [lo, hi], all acquired by the member.
func (p *Partition) ackRange(c *changes, lo, hi int64, t AckType) {
	for off := lo; off <= hi; {
		s := p.spans[p.find(off)]
		end := min(s.last, hi)
		switch t {
		case AckAccept:
			c.set(p, off, end, record{state: Acknowledged, count: s.count})
		case AckRelease:
			c.set(p, off, end, p.released(s.count))
		default: // reject, gap
			c.set(p, off, end, record{state: Archived, count: s.count})
		}
		off = end + 1
	}
}

// released is the state of a record whose lock ends without an
// acknowledgement: AVAILABLE, or ARCHIVED at the delivery-count limit.
func (p *Partition) released(count int16) record {
	if count >= p.cfg.DeliveryCountLimit {
		return record{state: Archived, count: count}
	}
	return record{state: Available, count: count}
}

// Tick releases the records whose locks expired by nowMs.
func (p *Partition) Tick(nowMs int64) *Write {
	return p.releaseWhere(func(r record) bool { return r.deadlineMs <= nowMs })
}

// MemberLeft releases the records member holds: it left the group, or its
// share session ended.
func (p *Partition) MemberLeft(member string) *Write {
	return p.releaseWhere(func(r record) bool { return r.member == member })
}

func (p *Partition) releaseWhere(match func(record) bool) *Write {
	c := p.changes()
	for i := 0; i < len(p.spans); i++ {
		s := p.spans[i]
		if s.state == Acquired && match(s.record) {
			c.set(p, s.first, s.last, p.released(s.count))
		}
	}
	return c.finish(p)
}

// AdvanceStart moves the SPSO up to offset: the log start moved past it
// (retention, DeleteRecords). The records below are forgotten, acquired
// ones included; their acknowledgements get INVALID_RECORD_STATE.
func (p *Partition) AdvanceStart(offset int64) *Write {
	if offset <= p.start {
		return nil
	}
	if offset > p.end {
		p.spans, p.end = nil, offset-1
	} else {
		p.splitAt(offset)
		p.spans = p.spans[p.find(offset):]
	}
	p.start = offset
	return &Write{StateEpoch: p.stateEpoch, LeaderEpoch: p.leaderEpoch, StartOffset: p.start}
}

// Reset starts the share-partition over at offset in a new state epoch
// (AlterShareGroupOffsets, DeleteShareGroupOffsets; the group must have no
// members) and returns the snapshot to write.
func (p *Partition) Reset(offset int64) *Write {
	p.stateEpoch++
	p.start, p.end, p.spans = offset, offset-1, nil
	return p.snapshot()
}

func (p *Partition) snapshot() *Write {
	return &Write{Snapshot: true, StateEpoch: p.stateEpoch, LeaderEpoch: p.leaderEpoch, StartOffset: p.start, Batches: p.stateBatches(p.start, p.end)}
}

// stateBatches is the durable state of the in-flight offsets in [lo, hi].
func (p *Partition) stateBatches(lo, hi int64) []StateBatch {
	var out []StateBatch
	for _, s := range p.spans {
		if s.last < lo || s.first > hi {
			continue
		}
		st, n := s.durable()
		first, last := max(s.first, lo), min(s.last, hi)
		if k := len(out); k > 0 && out[k-1].LastOffset+1 == first && out[k-1].DeliveryState == st && out[k-1].DeliveryCount == n {
			out[k-1].LastOffset = last
			continue
		}
		out = append(out, StateBatch{FirstOffset: first, LastOffset: last, DeliveryState: st, DeliveryCount: n})
	}
	return out
}

// find is the index of the span holding off, which must be in flight.
func (p *Partition) find(off int64) int {
	return sort.Search(len(p.spans), func(i int) bool { return p.spans[i].last >= off })
}

// splitAt makes off the first offset of a span, if it is in flight.
func (p *Partition) splitAt(off int64) {
	if off <= p.start || off > p.end {
		return
	}
	i := p.find(off)
	s := p.spans[i]
	if s.first == off {
		return
	}
	p.spans = append(p.spans, span{})
	copy(p.spans[i+2:], p.spans[i+1:])
	p.spans[i] = span{first: s.first, last: off - 1, record: s.record}
	p.spans[i+1] = span{first: off, last: s.last, record: s.record}
}

func (p *Partition) appendSpan(s span) {
	p.spans = append(p.spans, s)
	p.end = s.last
}

// coalesce joins adjacent spans in one state and moves the SPSO past the
// finished records at the bottom of the window.
func (p *Partition) coalesce() {
	out := p.spans[:0]
	for _, s := range p.spans {
		if n := len(out); n > 0 && out[n-1].record == s.record {
			out[n-1].last = s.last
			continue
		}
		out = append(out, s)
	}
	p.spans = out
	for len(p.spans) > 0 && p.spans[0].state.done() {
		p.start = p.spans[0].last + 1
		p.spans = p.spans[1:]
	}
	if len(p.spans) == 0 {
		p.start = p.end + 1
	}
}

// changes collects what one input changed in the durable state.
type changes struct {
	startBefore int64
	ranges      [][2]int64
}

func (p *Partition) changes() *changes { return &changes{startBefore: p.start} }

func (c *changes) add(lo, hi int64) { c.ranges = append(c.ranges, [2]int64{lo, hi}) }

// set puts [lo, hi], in flight within one span, in state r.
func (c *changes) set(p *Partition, lo, hi int64, r record) {
	before := p.spans[p.find(lo)].record
	p.splitAt(lo)
	p.splitAt(hi + 1)
	p.spans[p.find(lo)].record = r
	if !before.durableEqual(r) {
		c.add(lo, hi)
	}
}

// finish coalesces the partition and returns the Write of the changes.
func (c *changes) finish(p *Partition) *Write {
	p.coalesce()
	if len(c.ranges) == 0 && p.start == c.startBefore {
		return nil
	}
	sort.Slice(c.ranges, func(i, j int) bool { return c.ranges[i][0] < c.ranges[j][0] })
	w := &Write{StateEpoch: p.stateEpoch, LeaderEpoch: p.leaderEpoch, StartOffset: p.start}
	next := p.start // offsets below are written already
	for _, r := range c.ranges {
		lo, hi := max(r[0], next), min(r[1], p.end)
		if lo > hi {
			continue
		}
		for _, b := range p.stateBatches(lo, hi) {
			if n := len(w.Batches); n > 0 && w.Batches[n-1].LastOffset+1 == b.FirstOffset &&
				w.Batches[n-1].DeliveryState == b.DeliveryState && w.Batches[n-1].DeliveryCount == b.DeliveryCount {
				w.Batches[n-1].LastOffset = b.LastOffset
				continue
			}
			w.Batches = append(w.Batches, b)
		}
		next = hi + 1
	}
	return w
}
