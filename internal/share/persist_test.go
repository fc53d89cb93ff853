package share

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestStoreFences: a deposed leader's write and an update of an earlier
// state epoch are refused and change nothing; a tombstone forgets a key.
func TestStoreFences(t *testing.T) {
	st := NewStore()
	if _, err := st.Write(testKey, &Write{Snapshot: true, StateEpoch: 1, LeaderEpoch: 5, StartOffset: 10}, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		w    Write
		want error
	}{
		{Write{StateEpoch: 1, LeaderEpoch: 4, StartOffset: 12}, kerr.FencedLeaderEpoch},
		{Write{StateEpoch: 0, LeaderEpoch: 5, StartOffset: 12}, kerr.FencedStateEpoch},
		{Write{StateEpoch: 2, LeaderEpoch: 5, StartOffset: 12}, kerr.FencedStateEpoch},
		{Write{Snapshot: true, StateEpoch: 0, LeaderEpoch: 6, StartOffset: 12}, kerr.FencedStateEpoch},
	} {
		if _, err := st.Write(testKey, &tc.w, 0); !errors.Is(err, tc.want) {
			t.Errorf("write %+v: got %v, want %v", tc.w, err, tc.want)
		}
	}
	if got := st.Get(testKey); got.StartOffset != 10 || got.LeaderEpoch != 5 {
		t.Fatalf("a fenced write changed the state: %+v", got)
	}
	rec, err := st.Write(testKey, &Write{StateEpoch: 1, LeaderEpoch: 6, StartOffset: 12,
		Batches: []StateBatch{{FirstOffset: 12, LastOffset: 20, DeliveryState: Acknowledged, DeliveryCount: 1}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	replayed := NewStore()
	for _, r := range []StoreRecord{rec, st.Delete(testKey)} {
		if err := replayed.Replay(r.Key, r.Value); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	if st.Get(testKey) != nil || replayed.Get(testKey) != nil {
		t.Fatal("a deleted key is still held")
	}
}
