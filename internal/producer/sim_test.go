package producer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-io/strata/internal/record"
)

// simBatch is a batch an idempotent client sent and has not yet seen
// acknowledged.
type simBatch struct {
	h         record.Header
	processed bool // the broker handled the latest send
	offset    int64
}

type simClient struct {
	id       int64
	epoch    int16
	nextSeq  int32
	inflight []*simBatch // oldest first, at most NumBatchesToRetain
	// broken is a dead connection: sends are lost until the client
	// reconnects and resends everything unacknowledged, in order.
	broken bool
	acked  map[seqKey]int64 // offset answered per batch
}

type seqKey struct {
	epoch int16
	seq   int32
}

// simulate runs idempotent clients with up to five requests in flight
// against the produce path, losing requests and responses at random the way
// a dying connection does, restarting the broker (rebuilding its state from
// a snapshot and the log) now and then, and checks that every record is in
// the log exactly once, in order, at the offset the client was told.
func simulate(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	l := newTestLog()
	clients := []*simClient{
		{id: 1, acked: map[seqKey]int64{}},
		{id: 2, acked: map[seqKey]int64{}},
		// Starts just below the wrap, as a long-lived producer would.
		{id: 3, nextSeq: math.MaxInt32 - 40, acked: map[seqKey]int64{}},
	}
	var snapshot []byte
	var snapshotOffset int64
	send := func(c *simClient, b *simBatch) {
		if c.broken || rng.IntN(12) == 0 {
			c.broken = true
			b.processed = false
			return
		}
		base, _, err := l.produce(b.h)
		if err != nil {
			t.Fatalf("seed %d: producer %d seq %d: %v", seed, c.id, b.h.BaseSequence, err)
		}
		b.processed, b.offset = true, base
	}
	for range steps {
		c, r := clients[rng.IntN(len(clients))], rng.IntN(20)
		switch {
		case r < 9 && len(c.inflight) < NumBatchesToRetain:
			n := 1 + rng.Int32N(4)
			b := &simBatch{h: batch(c.id, c.epoch, c.nextSeq, n)}
			c.nextSeq = record.IncrementSequence(c.nextSeq, n)
			c.inflight = append(c.inflight, b)
			send(c, b)
		case r < 15 && len(c.inflight) > 0 && c.inflight[0].processed && !c.broken:
			// The oldest response arrives; a lost one breaks the
			// connection instead.
			if rng.IntN(6) == 0 {
				c.broken = true
				continue
			}
			b := c.inflight[0]
			c.inflight = c.inflight[1:]
			c.acked[seqKey{b.h.ProducerEpoch, b.h.BaseSequence}] = b.offset
		case r < 17 && (c.broken || len(c.inflight) > 0 && !c.inflight[0].processed):
			c.broken = false
			for _, b := range c.inflight {
				send(c, b)
			}
		case r < 18 && len(c.inflight) == 0 && rng.IntN(8) == 0:
			// Some clients bump their epoch themselves (sarama).
			c.epoch++
			c.nextSeq = 0
		case r < 19:
			if _, _, err := l.produce(plain(1 + rng.Int32N(3))); err != nil {
				t.Fatal(err)
			}
		default:
			// Roll (snapshot) or crash and restart (rebuild).
			if rng.IntN(2) == 0 {
				snapshot, snapshotOffset = l.state.Snapshot(), l.leo
				continue
			}
			rebuilt := NewPartitionState()
			err := rebuilt.Rebuild(snapshot, func(apply func(record.Header) bool) error {
				for _, h := range l.log {
					if h.BaseOffset >= snapshotOffset && !apply(h) {
						break
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			equalStates(t, l.state, rebuilt)
			l.state = rebuilt
		}
	}
	// Drain: reconnect and resend until everything is acknowledged.
	for _, c := range clients {
		c.broken = false
		for _, b := range c.inflight {
			send(c, b)
			for !b.processed {
				c.broken = false
				send(c, b)
			}
			c.acked[seqKey{b.h.ProducerEpoch, b.h.BaseSequence}] = b.offset
		}
		c.inflight = nil
	}
	checkExactlyOnce(t, seed, l, clients)
}

// checkExactlyOnce checks that each client's batches are in the log once
// each, in sequence order within an epoch, at the offsets the client was
// answered, and that every acknowledged batch is there.
func checkExactlyOnce(t *testing.T, seed uint64, l *testLog, clients []*simClient) {
	for _, c := range clients {
		epoch, next := int16(0), int32(0)
		if c.id == 3 {
			next = math.MaxInt32 - 40
		}
		seen := 0
		for _, h := range l.log {
			if h.ProducerID != c.id {
				continue
			}
			if h.ProducerEpoch != epoch {
				if h.ProducerEpoch < epoch {
					t.Fatalf("seed %d: producer %d: epoch %d after %d", seed, c.id, h.ProducerEpoch, epoch)
				}
				epoch, next = h.ProducerEpoch, 0
			}
			if h.BaseSequence != next {
				t.Fatalf("seed %d: producer %d epoch %d: sequence %d in the log where %d was due (duplicate or gap)", seed, c.id, epoch, h.BaseSequence, next)
			}
			off, ok := c.acked[seqKey{epoch, h.BaseSequence}]
			if !ok || off != h.BaseOffset {
				t.Fatalf("seed %d: producer %d seq %d at offset %d, client was told %d (acked %v)", seed, c.id, h.BaseSequence, h.BaseOffset, off, ok)
			}
			next = record.IncrementSequence(h.LastSequence(), 1)
			seen++
		}
		if seen != len(c.acked) {
			t.Fatalf("seed %d: producer %d: %d batches in the log, %d acknowledged", seed, c.id, seen, len(c.acked))
		}
	}
}

func TestSimulatedRetriesAndRestarts(t *testing.T) {
	for seed := range uint64(40) {
		simulate(t, seed, 3000)
	}
}
