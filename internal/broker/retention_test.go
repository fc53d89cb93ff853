package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestRetentionRunsInTheBroker writes records two days old into a topic
// that keeps one day, and waits for the broker's own retention loop to
// delete the segments that rolled, advancing the log start offset.
func TestRetentionRunsInTheBroker(t *testing.T) {
	b := startBroker(t, map[string]string{"log.retention.check.interval.ms": "50"})
	adm := newAdmin(t, b.Addr())
	createTopic(t, adm, "short-lived", 1, map[string]*string{"retention.ms": ptr("86400000"), "segment.bytes": ptr("2048")})
	ctx := testContext(t)
	cl := newClient(t, b.Addr(), kgo.ProducerLinger(0))
	old := time.Now().Add(-48 * time.Hour)
	for i := 0; i < 100; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "short-lived", Value: make([]byte, 200), Timestamp: old}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Everything but the active segment goes.
	l, _ := b.logs.Log("short-lived", 0)
	poll.UntilStatus(t, 30*time.Second, "retention to delete the old segments", func() (bool, string) {
		starts, err := adm.ListStartOffsets(ctx, "short-lived")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := starts.Lookup("short-lived", 0)
		n := l.NumSegments()
		return o.Offset > 0 && n == 1, fmt.Sprintf("log start %d, %d segments", o.Offset, n)
	})
}
