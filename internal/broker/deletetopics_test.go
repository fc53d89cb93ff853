package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestDeleteTopicDeletesCommittedOffsets checks that a deleted topic's
// committed offsets go with it, so a new topic of the same name starts
// with none.
func TestDeleteTopicDeletesCommittedOffsets(t *testing.T) {
	b := startBroker(t, nil)
	adm := newAdmin(t, b.Addr())
	ctx := testContext(t)
	createTopic(t, adm, "doomed", 1, nil)
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: "doomed", Partition: 0, At: 0, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "watcher", offsets); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteTopics(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	fetched, err := adm.FetchOffsets(ctx, "watcher")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup("doomed", 0); ok && o.At >= 0 {
		t.Fatalf("offset %d still committed for a deleted topic", o.At)
	}
}
