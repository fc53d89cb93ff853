package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/vfs"
)

// testQuorum is a real single-voter quorum over an in-memory file system.
type testQuorum struct {
	fs   vfs.FS
	dir  string
	logs *storage.Manager
	node *quorum.Node
}

func startQuorum(t *testing.T, fs vfs.FS, dir string) *testQuorum {
	t.Helper()
	m, err := storage.OpenManager(fs, dir, storage.ManagerOptions{Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.GetOrCreate(MetadataTopic, 0, storage.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	n, err := quorum.Open(quorum.Config{NodeID: 1, Voters: map[int32]string{1: ""}, WAL: l, FS: fs, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	q := &testQuorum{fs: fs, dir: dir, logs: m, node: n}
	t.Cleanup(q.close)
	return q
}

func (q *testQuorum) close() {
	q.node.Close()
	q.logs.Close()
}

// lastIndex is the quorum's last entry.
func (q *testQuorum) lastIndex(t *testing.T) uint64 {
	st, err := q.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.LastIndex
}

func testConfig() Config {
	return Config{
		NodeID: 1, DefaultPartitions: 1, DefaultReplicationFactor: 1,
		ValidateTopicConfig:  func(string, string) error { return nil },
		ValidateBrokerConfig: func(string, string) error { return nil },
	}
}

func discard() *slog.Logger {
	if os.Getenv("STRATA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// openTest opens a controller over q with a registered broker 1.
func openTest(t *testing.T, q *testQuorum, publish Publish) *Controller {
	t.Helper()
	if publish == nil {
		publish = func(_, _ *metadata.Image) {}
	}
	c, err := Open(context.Background(), testConfig(), q.node, discard(), publish)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	epoch, err := c.RegisterBroker(context.Background(), Registration{NodeID: 1, Listeners: []metadata.Endpoint{{Name: "PLAINTEXT", Host: "localhost", Port: 9092}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Heartbeat(context.Background(), Heartbeat{NodeID: 1, Epoch: epoch, MetadataOffset: c.Image().Offset + 1}); err != nil || r.IsFenced {
		t.Fatalf("heartbeat: %+v %v", r, err)
	}
	return c
}

func TestConcurrentCreatesOfOneTopicCommitOnce(t *testing.T) {
	c := openTest(t, startQuorum(t, vfs.NewMem(), "/data"), nil)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			res := c.CreateTopics(context.Background(), []TopicSpec{{Name: "orders", NumPartitions: 3, ReplicationFactor: 1}}, false)
			errs <- res[0].Err
		}()
	}
	ok := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, kerr.TopicAlreadyExists):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creations succeeded, want 1", ok)
	}
	if got := len(c.Image().Topics["orders"].Partitions); got != 3 {
		t.Fatalf("orders has %d partitions, want 3", got)
	}
}

func TestCreateTopicsIsOneAppend(t *testing.T) {
	q := startQuorum(t, vfs.NewMem(), "/data")
	c := openTest(t, q, nil)
	before := q.lastIndex(t)
	var specs []TopicSpec
	for i := range 100 {
		specs = append(specs, TopicSpec{Name: fmt.Sprintf("t%d", i), NumPartitions: 10, ReplicationFactor: 1})
	}
	// One bad and one colliding spec fail alone.
	specs = append(specs, TopicSpec{Name: "bad name", NumPartitions: 1, ReplicationFactor: 1},
		TopicSpec{Name: "t_1", NumPartitions: 1, ReplicationFactor: 1}, TopicSpec{Name: "t.1", NumPartitions: 1, ReplicationFactor: 1})
	res := c.CreateTopics(context.Background(), specs, false)
	for i := range 100 {
		if res[i].Err != nil {
			t.Fatalf("topic %d: %v", i, res[i].Err)
		}
	}
	if !errors.Is(res[100].Err, kerr.InvalidTopicException) || res[101].Err != nil || !errors.Is(res[102].Err, kerr.InvalidTopicException) {
		t.Fatalf("bad name: %v; t_1: %v; t.1 (collides with t_1): %v", res[100].Err, res[101].Err, res[102].Err)
	}
	if got := q.lastIndex(t) - before; got != 1 {
		t.Fatalf("%d entries for one CreateTopics, want 1", got)
	}
	if got := len(c.Image().Topics); got != 101 {
		t.Fatalf("%d topics, want 101", got)
	}
	// validate_only plans and writes nothing.
	res = c.CreateTopics(context.Background(), []TopicSpec{{Name: "dry", NumPartitions: 1, ReplicationFactor: 1}}, true)
	if res[0].Err != nil || q.lastIndex(t)-before != 1 || c.Image().Topics["dry"] != nil {
		t.Fatalf("validate only: %v, %d entries", res[0].Err, q.lastIndex(t)-before)
	}
}

func TestPublishInOrderOutsideTheProposer(t *testing.T) {
	q := startQuorum(t, vfs.NewMem(), "/data")
	var mu sync.Mutex
	var last *metadata.Image
	release := make(chan struct{})
	blocking := make(chan struct{}, 1)
	block := false
	publish := func(old, img *metadata.Image) {
		mu.Lock()
		if last != nil && old != last {
			t.Errorf("published old image at %d, want the previous one at %d", old.Offset, last.Offset)
		}
		if last != nil && img.Offset <= old.Offset {
			t.Errorf("image at %d published after %d", img.Offset, old.Offset)
		}
		last = img
		b := block
		mu.Unlock()
		if b {
			blocking <- struct{}{}
			<-release
		}
	}
	c := openTest(t, q, publish)
	mu.Lock()
	block = true
	mu.Unlock()

	first := make(chan error, 1)
	go func() {
		first <- c.CreateTopics(context.Background(), []TopicSpec{{Name: "a", NumPartitions: 1, ReplicationFactor: 1}}, false)[0].Err
	}()
	// However the test ends, the blocked publication is released before
	// the cleanups close the controller.
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	<-blocking // a's image is being published, and the publication blocks
	before := q.lastIndex(t)
	// The proposer is free: b is planned against a (pending) and handed
	// to the log while a's publication runs.
	second := make(chan error, 1)
	go func() {
		second <- c.CreateTopics(context.Background(), []TopicSpec{{Name: "a", NumPartitions: 1, ReplicationFactor: 1}, {Name: "b", NumPartitions: 1, ReplicationFactor: 1}}, false)[1].Err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := q.lastIndex(t) - before
		if n == 1 { // b's entry
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second proposal not handed to the quorum while the first publication blocks (%d entries)", n)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-first:
		t.Fatalf("CreateTopics returned (%v) before its image was published", err)
	default:
	}
	mu.Lock()
	block = false
	mu.Unlock()
	close(release)
	released = true
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if c.Image().Topics["b"] == nil {
		t.Fatal("b not published")
	}
}

func TestProposalTimesOutWhilePublicationBlocks(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	armed := make(chan struct{})
	publish := func(_, _ *metadata.Image) {
		select {
		case <-armed:
			<-release
		default:
		}
	}
	c := openTest(t, startQuorum(t, vfs.NewMem(), "/data"), publish)
	close(armed)
	defer once.Do(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res := c.CreateTopics(ctx, []TopicSpec{{Name: "slow", NumPartitions: 1, ReplicationFactor: 1}}, false)
	if !errors.Is(res[0].Err, kerr.RequestTimedOut) {
		t.Fatalf("got %v, want REQUEST_TIMED_OUT", res[0].Err)
	}
	once.Do(func() { close(release) })
}

func TestReopenReplaysAndPublishesBeforeReturning(t *testing.T) {
	fs := vfs.NewMem()
	q := startQuorum(t, fs, "/data")
	c := openTest(t, q, nil)
	c.CreateTopics(context.Background(), []TopicSpec{{Name: "kept", NumPartitions: 2, ReplicationFactor: 1}}, false)
	id := c.Image().ClusterID
	c.Close()
	q.close()

	q = startQuorum(t, fs, "/data")
	var published *metadata.Image
	c2, err := Open(context.Background(), testConfig(), q.node, discard(), func(_, img *metadata.Image) { published = img })
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if published == nil || published.Topics["kept"] == nil || published.ClusterID != id {
		t.Fatalf("reopened controller did not publish the replayed image before Open returned: %+v", published)
	}
	c2.Close()
	q.close()

	q = startQuorum(t, fs, "/data")
	cfg := testConfig()
	cfg.ClusterID = "other"
	if _, err := Open(context.Background(), cfg, q.node, discard(), func(_, _ *metadata.Image) {}); err == nil {
		t.Fatal("opened the metadata of another cluster")
	}
}

// A controller that is not (or no longer) the active one refuses every
// change with NOT_CONTROLLER, and says so for every topic of a request.
func TestInactiveControllerRefusesEveryTopic(t *testing.T) {
	q := startQuorum(t, vfs.NewMem(), "/data")
	c := openTest(t, q, nil)
	q.node.Close()
	poll.Until(t, 10*time.Second, "the controller to notice its quorum stopped", func() bool {
		_, active := c.Leader()
		return !active
	})
	specs := []TopicSpec{{Name: "a", NumPartitions: 1, ReplicationFactor: 1}, {Name: "b", NumPartitions: 1, ReplicationFactor: 1}}
	for i, res := range c.CreateTopics(context.Background(), specs, false) {
		if !errors.Is(res.Err, kerr.NotController) {
			t.Errorf("CreateTopics, topic %d: %v, want NOT_CONTROLLER", i, res.Err)
		}
	}
	for i, res := range c.DeleteTopics(context.Background(), []TopicRef{{Name: "a"}, {Name: "b"}}) {
		if !errors.Is(res.Err, kerr.NotController) || res.Name == "" {
			t.Errorf("DeleteTopics, topic %d: %+v, want NOT_CONTROLLER", i, res)
		}
	}
	for i, err := range c.CreatePartitions(context.Background(), []PartitionsSpec{{Topic: "a", Count: 2}}, false) {
		if !errors.Is(err, kerr.NotController) {
			t.Errorf("CreatePartitions, topic %d: %v, want NOT_CONTROLLER", i, err)
		}
	}
}

// A committed entry that does not decode stops the controller: it does
// not skip past it (an image built past it is wrong, and the broker would
// delete partitions by it), and a restart refuses to open.
func TestCorruptEntryStopsTheController(t *testing.T) {
	fs := vfs.NewMem()
	q := startQuorum(t, fs, "/data")
	c := openTest(t, q, nil)
	if err := q.node.Propose(context.Background(), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the controller to stop", func() bool { return errors.Is(c.Err(), ErrCorrupt) })
	res := c.CreateTopics(context.Background(), []TopicSpec{{Name: "after", NumPartitions: 1, ReplicationFactor: 1}}, false)
	if res[0].Err == nil {
		t.Fatal("a stopped controller created a topic")
	}
	c.Close()
	q.close()

	q = startQuorum(t, fs, "/data")
	if _, err := Open(context.Background(), testConfig(), q.node, discard(), func(_, _ *metadata.Image) {}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reopening over a corrupt entry: %v, want ErrCorrupt", err)
	}
}
