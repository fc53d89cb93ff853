package replica

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestFencing checks KIP-320 on every call that takes a leader epoch, in
// Kafka's order: the epoch first, then leadership.
func TestFencing(t *testing.T) {
	l := openLog(t, t.TempDir())
	leader := newLeader(t, l, Settings{MinInsyncReplicas: 1}) // epoch 3
	if _, err := leader.AppendAsLeader(batch(4, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	fresh, err := New("orders", 0, l, Settings{MinInsyncReplicas: 1}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(p *Partition, epoch int32) error{
		"Read": func(p *Partition, epoch int32) error {
			_, err := p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: epoch, MaxBytes: 1 << 20})
			return err
		},
		"OffsetForTime": func(p *Partition, epoch int32) error {
			_, err := p.OffsetForTime(epoch, LatestTimestamp, -1, false)
			return err
		},
		"EndOffsetForEpoch": func(p *Partition, epoch int32) error {
			_, _, err := p.EndOffsetForEpoch(epoch, 3)
			return err
		},
	}
	for _, c := range []struct {
		name  string
		p     *Partition
		epoch int32
		want  error
	}{
		{"leader, no epoch", leader, -1, nil},
		{"leader, current epoch", leader, 3, nil},
		{"leader, older epoch", leader, 2, kerr.FencedLeaderEpoch},
		{"leader, newer epoch", leader, 4, kerr.UnknownLeaderEpoch},
		{"never led, no epoch", fresh, -1, kerr.NotLeaderForPartition},
		{"never led, an epoch it does not know", fresh, 0, kerr.UnknownLeaderEpoch},
	} {
		for name, call := range calls {
			err := call(c.p, c.epoch)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%s: %s: %v, want %v", c.name, name, err, c.want)
			}
		}
	}
}

func TestReadStopsAtHighWatermark(t *testing.T) {
	p := newLeader(t, openLog(t, t.TempDir()), Settings{MinInsyncReplicas: 1, SyncEveryAppend: true})
	if _, err := p.AppendAsLeader(batch(3, -1, 0), 1); err != nil {
		t.Fatal(err)
	}
	// Appended but not flushed: nothing is committed yet.
	res, err := p.Read(ReadRequest{Offset: 0, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20})
	if err != nil || res.Region.Len != 0 || res.HighWatermark != 0 || res.Limit != 0 {
		t.Fatalf("read before the flush: %+v, %v", res, err)
	}
	if _, err := p.Read(ReadRequest{Offset: 4, CurrentLeaderEpoch: -1, MaxBytes: 1 << 20}); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("read past the log end: %v", err)
	}
	if _, err := p.DeleteRecordsBefore(2); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Fatalf("delete records past the high watermark: %v", err)
	}
	if o, err := p.OffsetForTime(-1, MaxTimestamp, -1, false); err != nil || o.Offset != -1 {
		t.Fatalf("max timestamp of nothing committed: %+v, %v", o, err)
	}
	if err := p.AwaitAcks(t.Context(), 3, 1); err != nil {
		t.Fatal(err)
	}
	if p.Limit(false, false, false) != 3 {
		t.Fatalf("limit after the flush: %d", p.Limit(false, false, false))
	}
	res, err = p.Read(ReadRequest{Offset: 1, CurrentLeaderEpoch: 3, MaxBytes: 1 << 20})
	if err != nil || res.Region.Len == 0 || res.HighWatermark != 3 {
		t.Fatalf("read after the flush: %+v, %v", res, err)
	}
	if low, err := p.DeleteRecordsBefore(-1); err != nil || low != 3 {
		t.Fatalf("delete records to the high watermark: %d, %v", low, err)
	}
	if o, err := p.OffsetForTime(3, EarliestTimestamp, -1, false); err != nil || o.Offset != 3 || o.LeaderEpoch != 3 {
		t.Fatalf("earliest after deleting: %+v, %v", o, err)
	}
	if _, err := p.OffsetForTime(3, -7, -1, false); !errors.Is(err, kerr.UnsupportedVersion) {
		t.Fatalf("timestamp -7: %v", err)
	}
}
