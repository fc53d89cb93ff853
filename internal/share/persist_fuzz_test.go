package share

import (
	"errors"
	"math"
	"testing"
)

// FuzzReplay feeds arbitrary records to Store.Replay and recovers a
// share-partition from what it holds: every record is applied or refused
// with ErrCorruptRecord, never a panic; a recovered partition keeps its
// invariants (spans in order, contiguous, within [SPSO, SPEO]) and serves
// an acquisition and an acknowledgement.
func FuzzReplay(f *testing.F) {
	st := NewStore()
	snap, _ := st.Write(testKey, &Write{Snapshot: true, StateEpoch: 1, LeaderEpoch: 2, StartOffset: 5,
		Batches: []StateBatch{{5, 9, Available, 1}, {10, 10, Archived, 5}, {12, 14, Acknowledged, 2}}}, 7)
	upd, _ := st.Write(testKey, &Write{StateEpoch: 1, LeaderEpoch: 3, StartOffset: 6,
		Batches: []StateBatch{{8, 11, Acknowledged, 2}}}, 8)
	f.Add(snap.Key, snap.Value, upd.Key, upd.Value)
	f.Add(snap.Key, []byte(nil), upd.Key, []byte{0, 0})
	f.Add([]byte{0, 1}, []byte{0, 0, 0}, upd.Key, upd.Value)
	f.Fuzz(func(t *testing.T, key1, value1, key2, value2 []byte) {
		st := NewStore()
		for _, r := range [][2][]byte{{key1, value1}, {key2, value2}} {
			if err := st.Replay(r[0], r[1]); err != nil && !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
		}
		for _, s := range st.states {
			p := Recover(DefaultConfig(), 1, s)
			checkInvariants(t, p)
			got, _ := p.Acquire("m", 100, []LogBatch{{FirstOffset: p.FetchOffset(), LastOffset: p.FetchOffset() + 50}}, nil, 0)
			checkInvariants(t, p)
			for _, a := range got {
				if _, err := p.Acknowledge("m", []AckBatch{{a.FirstOffset, a.LastOffset, []AckType{AckAccept}}}); err != nil {
					t.Fatalf("acknowledging acquired %+v: %v", a, err)
				}
			}
			checkInvariants(t, p)
		}
	})
}

func checkInvariants(t *testing.T, p *Partition) {
	t.Helper()
	next := p.start
	for _, s := range p.spans {
		if s.first != next || s.last < s.first {
			t.Fatalf("span %d-%d after %d (spso %d speo %d)", s.first, s.last, next-1, p.start, p.end)
		}
		next = s.last + 1
	}
	if len(p.spans) > 0 && next != p.end+1 {
		t.Fatalf("spans end at %d, speo %d", next-1, p.end)
	}
	if len(p.spans) == 0 && p.end != p.start-1 {
		t.Fatalf("nothing in flight, spso %d speo %d", p.start, p.end)
	}
}

// TestAcquireNearMaxOffset: offsets at the top of int64 do not overflow
// the max-records and max-locks arithmetic.
func TestAcquireNearMaxOffset(t *testing.T) {
	top := int64(math.MaxInt64 - 10)
	p, _ := Initialize(DefaultConfig(), 0, 1, top)
	got, _ := p.Acquire("m", math.MaxInt32, []LogBatch{{FirstOffset: top, LastOffset: top + 5}}, nil, 0)
	checkInvariants(t, p)
	if len(got) != 1 || got[0].FirstOffset != top || got[0].LastOffset != top+5 {
		t.Fatalf("acquired %+v", got)
	}
	p.Tick(math.MaxInt64)
	got, _ = p.Acquire("m", math.MaxInt32, []LogBatch{{FirstOffset: top, LastOffset: top + 9}}, nil, 0)
	checkInvariants(t, p)
	want := []AcquiredRecords{{top, top + 5, 2}, {top + 6, top + 9, 1}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("acquired %+v, want %+v", got, want)
	}
}
