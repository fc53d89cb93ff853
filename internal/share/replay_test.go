package share

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestWritesReplayToState drives a share-partition with random inputs and
// after every input checks the durable form against it: the records
// written so far, encoded and replayed in order into a fresh Store, hold exactly
// the partition's state with acquired records AVAILABLE, and a partition
// recovered from them has the same in-flight window.
func TestWritesReplayToState(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { replayRandom(t, seed) })
	}
}

func replayRandom(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	cfg := Config{LockDurationMs: 100, DeliveryCountLimit: 3, MaxRecordLocks: 40, ReadCommitted: rng.IntN(2) == 0}
	p, w := Initialize(cfg, 0, 1, int64(rng.IntN(5)))
	store := NewStore()
	store.UpdatesPerSnapshot = 1 + rng.IntN(8)
	replayed := NewStore() // fed each record as it is written
	members := []string{"a", "b", "c"}
	now := int64(0)
	for step := 0; step < 150; step++ {
		if w != nil {
			rec, err := store.Write(testKey, w, now)
			if err != nil {
				t.Fatalf("step %d: store write %+v: %v", step, w, err)
			}
			if err := replayed.Replay(rec.Key, rec.Value); err != nil {
				t.Fatalf("step %d: replay: %v", step, err)
			}
		}
		checkInvariants(t, p)
		checkReplay(t, step, p, replayed.Get(testKey))
		now += int64(rng.IntN(60))
		m := members[rng.IntN(len(members))]
		switch op := rng.IntN(10); {
		case op < 4:
			var batches []LogBatch
			off := p.FetchOffset() - int64(rng.IntN(3))
			for range 1 + rng.IntN(3) {
				n := int64(1 + rng.IntN(6))
				b := LogBatch{FirstOffset: off, LastOffset: off + n - 1, ProducerID: int64(rng.IntN(2)), Transactional: rng.IntN(3) == 0}
				b.Control = b.Transactional && n == 1 && rng.IntN(2) == 0
				batches = append(batches, b)
				off += n + int64(rng.IntN(2)) // sometimes a compacted gap
			}
			var aborted []AbortedTransaction
			if rng.IntN(3) == 0 {
				aborted = append(aborted, AbortedTransaction{ProducerID: 1, FirstOffset: batches[0].FirstOffset})
			}
			_, w = p.Acquire(m, 1+rng.IntN(12), batches, aborted, now)
		case op < 8:
			// Acknowledge some of what m holds, with random types.
			var acks []AckBatch
			for _, s := range p.spans {
				if s.state != Acquired || s.member != m || rng.IntN(3) == 0 {
					continue
				}
				a := AckBatch{FirstOffset: s.first, LastOffset: s.last}
				if rng.IntN(2) == 0 {
					a.Types = []AckType{AckType(rng.IntN(4))}
				} else {
					for range s.last - s.first + 1 {
						a.Types = append(a.Types, AckType(rng.IntN(4)))
					}
				}
				acks = append(acks, a)
			}
			var err error
			if w, err = p.Acknowledge(m, acks); err != nil {
				t.Fatalf("step %d: acknowledging %+v held by %s: %v", step, acks, m, err)
			}
		case op < 9:
			w = p.Tick(now)
		default:
			w = p.MemberLeft(m)
		}
	}
}

func checkReplay(t *testing.T, step int, p *Partition, st *State) {
	t.Helper()
	want := p.stateBatches(p.start, p.end)
	if st.StartOffset != p.start || !slices.Equal(st.Batches, want) {
		t.Fatalf("step %d: replayed start %d %v, partition start %d %v", step, st.StartOffset, st.Batches, p.start, want)
	}
	r := Recover(p.cfg, p.leaderEpoch+1, st)
	checkInvariants(t, r)
	if r.start != p.start || r.end != p.end || !slices.Equal(r.stateBatches(r.start, r.end), want) {
		t.Fatalf("step %d: recovered %d-%d %v, partition %d-%d %v", step, r.start, r.end, r.stateBatches(r.start, r.end), p.start, p.end, want)
	}
	for _, s := range r.spans {
		if s.state == Acquired {
			t.Fatalf("step %d: recovered an acquired span %+v", step, s)
		}
	}
}
