package producer

import (
	"fmt"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// produceLoop is the broker's produce path for one single-batch request per
// call, cycling over producers, as a benchmark and allocation test body.
type produceLoop struct {
	state *PartitionState
	seqs  []int32
	next  int
	leo   int64
	h     record.Header
}

func newProduceLoop(producers int) *produceLoop {
	p := &produceLoop{state: NewPartitionState(), seqs: make([]int32, producers), h: batch(0, 0, 0, 10)}
	for range producers {
		p.step() // the first batch of each producer allocates its entry
	}
	return p
}

func (p *produceLoop) step() {
	i := p.next
	p.next = (p.next + 1) % len(p.seqs)
	p.h.ProducerID = int64(i)
	p.h.BaseSequence = p.seqs[i]
	a := p.state.Begin()
	if dup, err := a.Check(p.h); err != nil || dup != nil {
		panic(fmt.Sprintf("dup %v err %v", dup, err))
	}
	a.Commit(p.leo)
	p.leo += int64(p.h.LastOffsetDelta) + 1
	p.seqs[i] = record.IncrementSequence(p.seqs[i], p.h.LastOffsetDelta+1)
}

func TestProducePathDoesNotAllocate(t *testing.T) {
	for _, producers := range []int{1, 100} {
		p := newProduceLoop(producers)
		if n := testing.AllocsPerRun(1000, p.step); n != 0 {
			t.Errorf("%d producers: %v allocations per batch", producers, n)
		}
	}
	l := newTestLog()
	l.produce(batch(1, 0, 0, 1))
	retry := func() {
		a := l.state.Begin()
		if dup, err := a.Check(batch(1, 0, 0, 1)); err != nil || dup == nil {
			panic("not a duplicate")
		}
	}
	if n := testing.AllocsPerRun(1000, retry); n != 0 {
		t.Errorf("duplicate: %v allocations per batch", n)
	}
}

// BenchmarkCheckCommit measures the produce path's cost per batch: Begin,
// Check and Commit of one idempotent batch, cycling over producers.
func BenchmarkCheckCommit(b *testing.B) {
	for _, producers := range []int{1, 1000, 100000} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			p := newProduceLoop(producers)
			b.ReportAllocs()
			for b.Loop() {
				p.step()
			}
		})
	}
}

// BenchmarkDuplicate measures answering a retried batch.
func BenchmarkDuplicate(b *testing.B) {
	l := newTestLog()
	for i := range int32(NumBatchesToRetain) {
		l.produce(batch(1, 0, i, 1))
	}
	h := batch(1, 0, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		a := l.state.Begin()
		if dup, err := a.Check(h); err != nil || dup == nil {
			b.Fatal("not a duplicate")
		}
	}
}
