package verify

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The checks of a transactional run, beside those of every run.

// checkTxnRead finds a read_committed read of a record of the run's topic
// that its transaction's outcome forbids: an aborted transaction's
// (aborted-read), or a record read before its producer asked to commit
// (intermediate-read). e is a poll of a value the run sent to e's
// partition.
func (c *checker) checkTxnRead(cons Consumer, e Event) {
	s := c.sendOf[e.Value]
	t := c.txn(s)
	if t == nil {
		return
	}
	switch {
	case t.Outcome == OutcomeAborted:
		c.report(AbortedRead, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name,
			Text: fmt.Sprintf("%s read %q at partition %d offset %d (producer id %d epoch %d), of producer %d's aborted transaction %d",
				cons.Name, e.Value, e.Partition, e.Offset, e.ProducerID, e.ProducerEpoch, t.Producer, t.ID)})
	case e.Nanos < t.EndNanos:
		c.report(IntermediateRead, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name,
			Text: fmt.Sprintf("%s read %q at partition %d offset %d (producer id %d epoch %d) %s before producer %d asked to end its transaction %d (%s)",
				cons.Name, e.Value, e.Partition, e.Offset, e.ProducerID, e.ProducerEpoch, millis(t.EndNanos-e.Nanos), t.Producer, t.ID, t.Outcome)})
	}
}

func millis(nanos int64) string { return fmt.Sprintf("%.1f ms", float64(nanos)/1e6) }

// copyRead is a copy read from the output topic.
type copyRead struct {
	offset int64
	value  string
	input  string
	copy   *CopyTxn
}

// checkCopies checks the copy stage: every input a committed copy
// transaction holds is in the output once, nothing of an aborted one is
// read, nothing is read before its transaction asked to commit, the
// stage skipped no committed input below what it committed past, and
// each output partition holds the copies in the order of their inputs.
func (c *checker) checkCopies(st *Stats) {
	h := c.h
	if h.OutputTopic == "" {
		return
	}
	type copyKey struct {
		copier int
		id     int64
	}
	copyOf := map[copyKey]*CopyTxn{}
	copiedBy := map[string][]*CopyTxn{} // input value -> committed copy transactions holding it
	committedPast := map[int32]int64{}  // partition -> highest input offset a committed copy holds
	for i := range h.Copies {
		ct := &h.Copies[i]
		copyOf[copyKey{ct.Copier, ct.ID}] = ct
		st.Copies.add(ct.Outcome)
		if ct.DoneNanos > 0 {
			st.LongestEndMillis = max(st.LongestEndMillis, float64(ct.DoneNanos-ct.EndNanos)/1e6)
		}
		if ct.Outcome != OutcomeCommitted {
			continue
		}
		for _, in := range ct.Inputs {
			copiedBy[in.Value] = append(copiedBy[in.Value], ct)
			if past, ok := committedPast[in.Partition]; !ok || in.Offset > past {
				committedPast[in.Partition] = in.Offset
			}
		}
	}
	st.Copied = len(copiedBy)

	out := map[int32]*partitionLog{}
	readCopies := map[string][]string{}  // input value -> distinct copy values read
	finalReads := map[int32][]copyRead{} // the output's final read, per partition
	for _, cons := range h.Consumers {
		if cons.Topic != h.OutputTopic {
			continue
		}
		for _, e := range cons.Events {
			if e.Type != EventPoll {
				continue
			}
			st.Polled++
			in, copier, id, ok := parseCopy(e.Value)
			ct := copyOf[copyKey{copier, id}]
			s := c.sendOf[in]
			if !ok || ct == nil || s == nil || s.Partition != e.Partition || !slices.ContainsFunc(ct.Inputs, func(i Input) bool { return i.Value == in }) {
				c.report(UnexpectedValue, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name,
					Text: fmt.Sprintf("%s read %q at output partition %d offset %d, not a copy any copy transaction made of an input of that partition", cons.Name, e.Value, e.Partition, e.Offset)})
				continue
			}
			switch {
			case ct.Outcome == OutcomeAborted:
				c.report(AbortedRead, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name,
					Text: fmt.Sprintf("%s read %q at output partition %d offset %d (producer id %d epoch %d), of copier %d's aborted transaction %d",
						cons.Name, e.Value, e.Partition, e.Offset, e.ProducerID, e.ProducerEpoch, ct.Copier, ct.ID)})
				continue // no copy: not a duplicate, nor out of order
			case e.Nanos < ct.EndNanos:
				c.report(IntermediateRead, Example{Partition: e.Partition, Offsets: []int64{e.Offset}, Values: []string{e.Value}, Consumer: cons.Name,
					Text: fmt.Sprintf("%s read %q at output partition %d offset %d %s before copier %d asked to end its transaction %d (%s)",
						cons.Name, e.Value, e.Partition, e.Offset, millis(ct.EndNanos-e.Nanos), ct.Copier, ct.ID, ct.Outcome)})
			}
			l := out[e.Partition]
			if l == nil {
				l = newPartitionLog()
				out[e.Partition] = l
			}
			l.observe(e.Offset, e.Value)
			if !slices.Contains(readCopies[in], e.Value) {
				readCopies[in] = append(readCopies[in], e.Value)
			}
			if cons.Kind == KindFinal {
				finalReads[e.Partition] = append(finalReads[e.Partition], copyRead{e.Offset, e.Value, in, ct})
			}
		}
	}

	c.checkCopyOffsets(out)
	c.checkCopyDuplicates(copiedBy, readCopies)
	c.checkCopyLosses(copiedBy, readCopies, committedPast)
	c.checkCopyOrder(finalReads)
}

// checkCopyOffsets finds output offsets read with two values, and copies
// read at two offsets.
func (c *checker) checkCopyOffsets(out map[int32]*partitionLog) {
	for _, p := range sortedPartitions(out) {
		l := out[p]
		offs := slices.Sorted(func(yield func(int64) bool) {
			for off := range l.valuesAt {
				if !yield(off) {
					return
				}
			}
		})
		for _, off := range offs {
			if vs := l.valuesAt[off]; len(vs) > 1 {
				c.report(InconsistentOffset, Example{Partition: p, Offsets: []int64{off}, Values: vs,
					Text: fmt.Sprintf("output partition %d offset %d read as %s", p, off, strings.Join(quoteAll(vs), " and "))})
			}
		}
		var twice []string
		for v, offs := range l.offsetsOf {
			if len(offs) > 1 {
				twice = append(twice, v)
			}
		}
		slices.Sort(twice)
		for _, v := range twice {
			offs := slices.Sorted(slices.Values(l.offsetsOf[v]))
			c.report(Duplicate, Example{Partition: p, Offsets: offs, Values: []string{v},
				Text: fmt.Sprintf("output partition %d: %q at offsets %s", p, v, joinOffsets(offs))})
		}
	}
}

// checkCopyDuplicates finds inputs copied more than once: by two
// committed copy transactions, or by transactions whose copies were both
// read (an unknown outcome read counts as committed).
func (c *checker) checkCopyDuplicates(copiedBy map[string][]*CopyTxn, readCopies map[string][]string) {
	inputs := make([]string, 0, len(copiedBy)+len(readCopies))
	for in := range copiedBy {
		inputs = append(inputs, in)
	}
	for in := range readCopies {
		if _, ok := copiedBy[in]; !ok {
			inputs = append(inputs, in)
		}
	}
	slices.Sort(inputs)
	for _, in := range inputs {
		var copies []string
		for _, ct := range copiedBy[in] {
			copies = append(copies, CopyValue(in, ct.Copier, ct.ID))
		}
		for _, v := range readCopies[in] {
			if !slices.Contains(copies, v) {
				copies = append(copies, v)
			}
		}
		if len(copies) < 2 {
			continue
		}
		slices.Sort(copies)
		s := c.sendOf[in]
		c.report(Duplicate, Example{Partition: s.Partition, Values: copies,
			Text: fmt.Sprintf("input %q (partition %d) copied %d times: %s", in, s.Partition, len(copies), strings.Join(quoteAll(copies), ", "))})
	}
}

// checkCopyLosses finds committed copies the output's final read, which
// reached the output's end, did not read, and committed inputs the copy
// stage skipped: below an input offset a committed copy transaction
// holds, but in none.
func (c *checker) checkCopyLosses(copiedBy map[string][]*CopyTxn, readCopies map[string][]string, committedPast map[int32]int64) {
	h := c.h
	reached := map[int32]bool{}
	for _, f := range h.Final {
		if f.Topic == h.OutputTopic && f.Reached {
			reached[f.Partition] = true
		}
	}
	for i := range h.Copies {
		ct := &h.Copies[i]
		if ct.Outcome != OutcomeCommitted {
			continue
		}
		for _, in := range ct.Inputs {
			v := CopyValue(in.Value, ct.Copier, ct.ID)
			if reached[in.Partition] && !slices.Contains(readCopies[in.Value], v) {
				c.report(LostWrite, Example{Partition: in.Partition, Values: []string{v},
					Text: fmt.Sprintf("%q of copier %d's committed transaction %d never read, though the final read read output partition %d to its end", v, ct.Copier, ct.ID, in.Partition)})
			}
		}
	}
	for i := range h.Sends {
		s := &h.Sends[i]
		past, ok := committedPast[s.Partition]
		if !s.Acked || !c.mustBeSeen(s) || !ok || s.Offset >= past {
			continue
		}
		if len(copiedBy[s.Value]) == 0 && len(readCopies[s.Value]) == 0 {
			c.report(LostWrite, Example{Partition: s.Partition, Offsets: []int64{s.Offset}, Values: []string{s.Value},
				Text: fmt.Sprintf("%q committed at partition %d offset %d, never copied, though the copy stage committed copies up to offset %d", s.Value, s.Partition, s.Offset, past)})
		}
	}
}

// checkCopyOrder finds, in the output's final read, a copy at a higher
// offset than a copy of a later input of the same partition.
func (c *checker) checkCopyOrder(finalReads map[int32][]copyRead) {
	for _, p := range sortedPartitions(finalReads) {
		reads := finalReads[p]
		slices.SortFunc(reads, func(a, b copyRead) int { return cmp.Compare(a.offset, b.offset) })
		var prev *copyRead
		var prevIn int64
		for i := range reads {
			r := &reads[i]
			in := inputOffset(r.copy, r.input)
			if prev != nil && r.offset > prev.offset && in <= prevIn {
				c.report(NonmonotonicCopy, Example{Partition: p, Offsets: []int64{prev.offset, r.offset}, Values: []string{prev.value, r.value},
					Text: fmt.Sprintf("output partition %d holds %q (input offset %d) at offset %d after %q (input offset %d) at offset %d",
						p, r.value, in, r.offset, prev.value, prevIn, prev.offset)})
			}
			prev, prevIn = r, in
		}
	}
}

func inputOffset(ct *CopyTxn, input string) int64 {
	for _, in := range ct.Inputs {
		if in.Value == input {
			return in.Offset
		}
	}
	return -1
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
