// Package controller owns changes to the cluster metadata. Metadata flows
// one way through it:
//
//		request ─▶ proposer ──entry──▶ quorum (etcd raft) ──committed stream──▶ applier
//		           (validates against                                           │ image N+1
//		            latest image + pending)                                     ▼
//		                                                            publisher ─▶ Publish (broker.applyImage)
//
//	  - The proposer (propose) runs only on the active controller: the
//	    quorum's leader, once it has applied the first entry of its term (so
//	    its image holds everything committed before). It turns a request into
//	    records, validated against the latest image with its own pending
//	    proposals applied, hands them to Raft as one entry and waits, with
//	    the request's context, until the applier has applied them and the
//	    publisher has published the image holding them. It holds its lock
//	    only while planning and handing over, never while waiting, and never
//	    calls the broker. Elsewhere it answers NOT_CONTROLLER.
//	  - The applier is one goroutine per node that reads the quorum's
//	    committed stream in order (entries, snapshots, leader changes),
//	    applies records to the image, completes the proposals waiting for
//	    them, and asks the quorum for a snapshot of the image every
//	    Config.SnapshotBytes of applied records. It does no I/O and takes no
//	    lock the quorum's loop could wait on.
//	  - The publisher is one goroutine that hands each new image, in order, to
//	    the Publish callback (the broker opens, leads and deletes partitions
//	    there). Images that arrive while a publication runs are coalesced: the
//	    callback gets the last published image and the newest one, and diffs
//	    them.
//
// An entry's data is JSON: the proposer (node id, a random incarnation id
// per process, a sequence number) and the records. A snapshot's data is
// the image as records (metadata.Image.Records), also JSON. The image's
// offset is the Raft index of the last entry applied.
//
// Errors returned to callers wrap a *kerr.Error, so the broker answers with
// the code a Kafka controller would, and the wrapped message.
//
// Lock order: Controller.mu (the proposer), then Controller.waitMu. The
// applier and publisher take waitMu only. No lock is held across the
// Publish callback or while waiting for the quorum.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quorum"
)

// Quorum is the replicated log under the controller: a quorum.Node.
type Quorum interface {
	// Propose hands one entry to Raft; quorum.ErrNotLeader unless this
	// node leads.
	Propose(ctx context.Context, data []byte) error
	// Apply is the committed stream, in order.
	Apply() <-chan quorum.Apply
	// Snapshot records a snapshot of the image at an applied index.
	Snapshot(s quorum.Snapshot)
	// Loaded is the snapshot the node started from and the commit index
	// it knew then.
	Loaded() (quorum.Snapshot, uint64)
	// ReadIndex is the commit index the leader confirms now.
	ReadIndex(ctx context.Context) (uint64, error)
	// Done is closed when the quorum stops.
	Done() <-chan struct{}
}

// Config is what the controller needs of the server configuration.
type Config struct {
	NodeID                   int32
	ClusterID                string // used when the cluster is new; "" generates one
	DefaultPartitions        int32  // num.partitions
	DefaultReplicationFactor int16  // default.replication.factor
	// SessionTimeout is broker.session.timeout.ms (9000): a broker that
	// has not heartbeated for this long is fenced.
	SessionTimeout time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// SnapshotBytes is metadata.log.max.record.bytes.between.snapshots
	// (20 MiB): the applied entry bytes after which the image is
	// snapshotted and the Raft log compacted behind it.
	SnapshotBytes int64
	// Policy holds the static defaults of the topic settings elections
	// depend on.
	Policy Policy
	// AutoLeaderRebalance is auto.leader.rebalance.enable (true): every
	// LeaderImbalanceCheckInterval (leader.imbalance.check.interval.seconds,
	// 300 s) the active controller gives preferred replicas back their
	// leadership where a broker leads fewer than
	// LeaderImbalancePerBrokerPercentage
	// (leader.imbalance.per.broker.percentage, 10) of those it prefers.
	AutoLeaderRebalance                bool
	LeaderImbalanceCheckInterval       time.Duration
	LeaderImbalancePerBrokerPercentage int
	// ValidateTopicConfig checks a topic-level key and value.
	ValidateTopicConfig func(key, value string) error
	// ValidateBrokerConfig checks a dynamic broker key and value.
	ValidateBrokerConfig func(key, value string) error
}

// Publish is called with every new image, in order, on the publisher's
// goroutine: old is the image published before (metadata.Empty() the first
// time), img the new one. Consecutive images may be coalesced, so img may
// be several entries past old.
type Publish func(old, img *metadata.Image)

// Controller applies metadata changes. It is safe for concurrent use.
type Controller struct {
	cfg         Config
	quorum      Quorum
	logger      *slog.Logger
	publish     Publish
	incarnation uint64

	// mu serializes the proposer: planning a change against pending and
	// handing it to the quorum.
	mu sync.Mutex
	// pending is the image with every proposal handed to the quorum in
	// term pendingTerm applied; it is stale once the applier has applied
	// proposal lastProposal, or the term moved on. c.mu guards them.
	pending      *metadata.Image
	pendingTerm  uint64
	lastProposal uint64
	// live is the brokers' heartbeat times, valid in term liveTerm (a new
	// active controller starts afresh). c.mu guards both.
	live     *liveness
	liveTerm uint64

	waitMu sync.Mutex
	// applied is the newest image the applier built; published the newest
	// the publisher handed to Publish; appliedProposal the sequence of the
	// last of this incarnation's proposals applied.
	applied, published *metadata.Image
	appliedProposal    uint64
	// leader (-1: none known) and term are the quorum's, from the
	// committed stream; activeTerm is the term this node is the active
	// controller in (0: not active).
	leader           int32
	term, activeTerm uint64
	// caughtUpAt is the quorum's commit index (a ReadIndex) when Open ran:
	// nothing is published before it is applied, so the broker never acts
	// on (and deletes partitions by) an image older than what it acted on
	// before a restart. -1 until known.
	caughtUpAt int64
	// failed is set when the applier stopped at corrupt metadata.
	failed error
	// waiters are proposals waiting to be applied, by sequence.
	waiters map[uint64]chan proposalResult
	// changed is closed and replaced whenever any of the above moves, so
	// waiters can select on it with their context.
	changed chan struct{}
	// unsnapshotted counts entry bytes applied since the last snapshot;
	// the applier owns it.
	unsnapshotted int64

	newImage chan struct{} // applier → publisher, capacity 1

	stop chan struct{}
	done sync.WaitGroup
}

type proposalResult struct {
	index int64
	err   error
}

// entry is the JSON of a Raft entry's data.
type entry struct {
	Proposer proposer          `json:"proposer"`
	Records  []metadata.Record `json:"records"`
}

type proposer struct {
	NodeID      int32  `json:"nodeId"`
	Incarnation uint64 `json:"incarnation"`
	Sequence    uint64 `json:"sequence"`
}

// snapshotData is the JSON of a snapshot's data.
type snapshotData struct {
	Records []metadata.Record `json:"records"`
}

// Open starts the controller over a quorum node: it loads the node's
// snapshot, starts the applier and the publisher, and returns once the
// node has caught up with the quorum (applied what was committed when it
// first heard of a leader; a single voter leads at once) and the image is
// published.
func Open(ctx context.Context, cfg Config, q Quorum, logger *slog.Logger, publish Publish) (*Controller, error) {
	if cfg.SnapshotBytes <= 0 {
		cfg.SnapshotBytes = 20 << 20
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 9 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{
		cfg: cfg, quorum: q, logger: logger, publish: publish,
		incarnation: rand.Uint64(),
		published:   metadata.Empty(),
		leader:      -1,
		waiters:     map[uint64]chan proposalResult{},
		changed:     make(chan struct{}),
		newImage:    make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	snap, _ := q.Loaded()
	img, err := decodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	c.applied = img
	c.caughtUpAt = -1
	c.done.Add(3)
	go c.runApplier()
	go c.runPublisher()
	go c.runFencer()
	start := time.Now()
	readIndex, err := q.ReadIndex(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("controller: learning the metadata quorum's commit index: %w", err)
	}
	c.waitMu.Lock()
	c.caughtUpAt = int64(readIndex)
	c.waitMu.Unlock()
	c.signalPublisher()
	if err := c.waitCaughtUp(ctx); err != nil {
		c.Close()
		return nil, err
	}
	img = c.Image()
	logger.Info("metadata loaded", "snapshot_index", snap.Index, "offset", img.Offset, "topics", len(img.Topics), "duration", time.Since(start).Round(time.Microsecond))
	if cfg.ClusterID != "" && img.ClusterID != "" && cfg.ClusterID != img.ClusterID {
		c.Close()
		return nil, fmt.Errorf("controller: cluster.id %s does not match the metadata's %s", cfg.ClusterID, img.ClusterID)
	}
	return c, nil
}

func decodeSnapshot(s quorum.Snapshot) (*metadata.Image, error) {
	img := metadata.Empty()
	if len(s.Data) > 0 {
		var d snapshotData
		if err := json.Unmarshal(s.Data, &d); err != nil {
			return nil, fmt.Errorf("controller: decoding the metadata snapshot at %d: %w", s.Index, err)
		}
		var err error
		if img, err = img.Apply(int64(s.Index), d.Records...); err != nil {
			return nil, fmt.Errorf("controller: loading the metadata snapshot at %d: %w", s.Index, err)
		}
	}
	return img.WithOffset(int64(s.Index)), nil
}

// Close stops the applier and the publisher. A publication under way
// finishes first. Proposals still waiting fail with NOT_CONTROLLER.
func (c *Controller) Close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	c.done.Wait()
}

// Image returns the latest published image: the one the broker acts on.
func (c *Controller) Image() *metadata.Image {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.published
}

// Leader returns the quorum's leader as the committed stream last told
// (-1: unknown) and whether this node is the active controller.
func (c *Controller) Leader() (leader int32, active bool) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.leader, c.activeTerm != 0
}

// waitCaughtUp blocks until the first image is published.
func (c *Controller) waitCaughtUp(ctx context.Context) error {
	for {
		c.waitMu.Lock()
		ok, changed, failed := c.caughtUpAt >= 0 && c.published.Offset >= c.caughtUpAt, c.changed, c.failed
		c.waitMu.Unlock()
		if failed != nil {
			return failed
		}
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("controller: catching up with the metadata quorum: %w", context.Cause(ctx))
		case <-c.stop:
			return errStopped
		}
	}
}

// Quorum returns the leader (-1: unknown), whether this node is the
// active controller, and the term, as the committed stream last told.
func (c *Controller) Quorum() (leader int32, active bool, term uint64) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.leader, c.activeTerm != 0, c.term
}

// WaitActive blocks until this node is the active controller.
func (c *Controller) WaitActive(ctx context.Context) error {
	for {
		c.waitMu.Lock()
		active, changed, failed := c.activeTerm != 0, c.changed, c.failed
		c.waitMu.Unlock()
		if active {
			return nil
		}
		if failed != nil {
			return failed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting to become the active controller: %v", kerr.NotController, context.Cause(ctx))
		case <-c.stop:
			return errStopped
		}
	}
}

// ErrCorrupt is returned once the committed metadata holds an entry that
// does not decode or apply: the controller stops applying there, and the
// node must not go on with the image it has.
var ErrCorrupt = errors.New("controller: corrupt metadata")

var (
	errStopped       = fmt.Errorf("%w: the controller is shutting down", kerr.NotController)
	errNotController = fmt.Errorf("%w: this node is not the active controller", kerr.NotController)
	errLostLeader    = fmt.Errorf("%w: the controller lost its leadership before the change was applied", kerr.NotController)
)

// propose runs plan against the latest image with the pending proposals
// applied, hands the records it returns to the quorum, and waits until
// they are applied and published. It returns the image right after the
// records (or the image plan saw, when it returns none). plan's error is
// returned as is.
func (c *Controller) propose(ctx context.Context, plan func(img *metadata.Image) ([]metadata.Record, error)) (*metadata.Image, error) {
	next, seq, done, err := c.handOver(ctx, plan)
	if err != nil || done == nil {
		return next, err
	}
	var res proposalResult
	select {
	case res = <-done:
	case <-ctx.Done():
		c.dropWaiter(seq)
		return nil, fmt.Errorf("%w: waiting for the metadata change to commit: %v", kerr.RequestTimedOut, context.Cause(ctx))
	case <-c.stop:
		return nil, errStopped
	}
	if res.err != nil {
		return nil, res.err
	}
	if err := c.waitPublished(ctx, res.index); err != nil {
		return nil, err
	}
	return next.WithOffset(res.index), nil
}

// handOver plans a change under c.mu and hands its records to the quorum.
// It returns the image after the records, and the proposal's sequence
// and result channel (nil when plan returned no records).
func (c *Controller) handOver(ctx context.Context, plan func(img *metadata.Image) ([]metadata.Record, error)) (*metadata.Image, uint64, chan proposalResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waitMu.Lock()
	applied, appliedSeq, term := c.applied, c.appliedProposal, c.activeTerm
	c.waitMu.Unlock()
	if term == 0 {
		return nil, 0, nil, errNotController
	}
	base := c.pending
	if base == nil || c.pendingTerm != term || appliedSeq >= c.lastProposal {
		base = applied
	}
	if c.live == nil || c.liveTerm != term {
		c.live, c.liveTerm = newLiveness(c.cfg.SessionTimeout), term
	}
	records, err := plan(base)
	if err != nil || len(records) == 0 {
		return base, 0, nil, err
	}
	// Apply first: a record that does not apply must never reach the log,
	// where every node would have to skip it.
	next, err := base.Apply(base.Offset+1, records...)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("controller: invariant: proposed records do not apply: %w", err)
	}
	seq := c.lastProposal + 1
	data, err := json.Marshal(entry{Proposer: proposer{NodeID: c.cfg.NodeID, Incarnation: c.incarnation, Sequence: seq}, Records: records})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%w: encoding metadata: %v", kerr.UnknownServerError, err)
	}
	done := make(chan proposalResult, 1)
	c.waitMu.Lock()
	c.waiters[seq] = done
	c.waitMu.Unlock()
	// Raft takes entries in the order of these calls, made under c.mu.
	if err := c.quorum.Propose(ctx, data); err != nil {
		c.dropWaiter(seq)
		if errors.Is(err, quorum.ErrNotLeader) {
			return nil, 0, nil, errNotController
		}
		return nil, 0, nil, fmt.Errorf("%w: proposing metadata: %v", kerr.NotController, err)
	}
	c.lastProposal = seq
	c.pending, c.pendingTerm = next, term
	return next, seq, done, nil
}

func (c *Controller) dropWaiter(seq uint64) {
	c.waitMu.Lock()
	delete(c.waiters, seq)
	c.waitMu.Unlock()
}

// waitPublished blocks until an image at or past offset is published.
func (c *Controller) waitPublished(ctx context.Context, offset int64) error {
	for {
		c.waitMu.Lock()
		ok, changed, failed := c.published.Offset >= offset, c.changed, c.failed
		c.waitMu.Unlock()
		if ok {
			return nil
		}
		if failed != nil {
			return failed
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the metadata change to be applied: %v", kerr.RequestTimedOut, context.Cause(ctx))
		case <-c.stop:
			return errStopped
		}
	}
}

// failLocked stops applying: err is returned to every waiter, now and
// later. c.waitMu must be held.
func (c *Controller) failLocked(err error) {
	c.failed = err
	c.activeTerm = 0
	c.logger.Error("metadata controller stopped", "err", err)
	c.failWaitersLocked(err)
}

// Err returns why the controller stopped applying (ErrCorrupt), or nil.
func (c *Controller) Err() error {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return c.failed
}

// notifyLocked wakes everything waiting on c.changed. c.waitMu must be
// held.
func (c *Controller) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// failWaitersLocked answers every waiting proposal with err. c.waitMu
// must be held.
func (c *Controller) failWaitersLocked(err error) {
	for seq, ch := range c.waiters {
		ch <- proposalResult{err: err}
		delete(c.waiters, seq)
	}
}

// runApplier applies the committed stream until Close.
func (c *Controller) runApplier() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			c.waitMu.Lock()
			c.failWaitersLocked(errStopped)
			c.waitMu.Unlock()
			return
		case <-c.quorum.Done():
			c.waitMu.Lock()
			c.activeTerm = 0
			c.failWaitersLocked(errStopped)
			c.notifyLocked()
			c.waitMu.Unlock()
			<-c.stop
			return
		case a := <-c.quorum.Apply():
			c.apply(a)
		}
	}
}

// apply applies one hand-over of the committed stream.
func (c *Controller) apply(a quorum.Apply) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	defer c.signalPublisher()
	defer c.notifyLocked()
	self := c.cfg.NodeID
	if c.failed != nil {
		return
	}
	if c.activeTerm != 0 && (a.Leader != self || a.Term != c.activeTerm) {
		c.logger.Info("no longer the active controller", "term", c.activeTerm, "leader", a.Leader, "new_term", a.Term)
		c.activeTerm = 0
		c.failWaitersLocked(errLostLeader)
	}
	c.leader, c.term = a.Leader, a.Term
	if a.Snapshot != nil {
		img, err := decodeSnapshot(*a.Snapshot)
		if err != nil {
			c.failLocked(fmt.Errorf("%w: the snapshot at %d: %v", ErrCorrupt, a.Snapshot.Index, err))
			return
		}
		c.logger.Info("metadata snapshot loaded", "index", a.Snapshot.Index, "topics", len(img.Topics))
		c.applied = img
		c.unsnapshotted = 0
	}
	for _, e := range a.Entries {
		if c.failed != nil {
			return
		}
		c.applyEntry(e, a, self)
	}
	if c.unsnapshotted >= c.cfg.SnapshotBytes {
		data, err := EncodeSnapshot(c.applied)
		if err == nil {
			c.quorum.Snapshot(quorum.Snapshot{Index: uint64(c.applied.Offset), Data: data})
			c.unsnapshotted = 0
		} else {
			c.logger.Error("encoding a metadata snapshot", "err", err)
		}
	}
}

// applyEntry applies one committed entry. c.waitMu must be held.
func (c *Controller) applyEntry(e quorum.Entry, a quorum.Apply, self int32) {
	index := int64(e.Index)
	if len(e.Data) == 0 {
		// A leader's first entry of its term: once it is applied, the
		// leader's image holds everything committed before it.
		c.applied = c.applied.WithOffset(index)
		if e.Term == a.Term && a.Leader == self && c.activeTerm != a.Term {
			c.activeTerm = a.Term
			c.logger.Info("active controller", "term", a.Term, "offset", index)
		}
		return
	}
	c.unsnapshotted += int64(len(e.Data))
	var ent entry
	err := json.Unmarshal(e.Data, &ent)
	var img *metadata.Image
	if err == nil {
		img, err = c.applied.Apply(index, ent.Records...)
	}
	if err != nil {
		// A committed entry that does not decode or apply is corruption
		// (or a proposer's bug): going on past it would build an image
		// that is wrong, and the broker would act on it, deleting the
		// partitions of topics it lost. Stop applying instead.
		c.failLocked(fmt.Errorf("%w: entry %d: %v", ErrCorrupt, index, err))
		return
	}
	c.applied = img
	if p := ent.Proposer; p.NodeID == c.cfg.NodeID && p.Incarnation == c.incarnation {
		c.appliedProposal = p.Sequence
		if ch, ok := c.waiters[p.Sequence]; ok {
			ch <- proposalResult{index: index, err: err}
			delete(c.waiters, p.Sequence)
		}
	}
}

// signalPublisher tells the publisher a newer image is applied.
func (c *Controller) signalPublisher() {
	select {
	case c.newImage <- struct{}{}:
	default:
	}
}

// runPublisher hands images to Publish, in order, until Close.
func (c *Controller) runPublisher() {
	defer c.done.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.newImage:
		}
		c.waitMu.Lock()
		old, img, at := c.published, c.applied, c.caughtUpAt
		c.waitMu.Unlock()
		if img == old || at < 0 || img.Offset < at {
			continue
		}
		c.publish(old, img)
		c.waitMu.Lock()
		c.published = img
		c.notifyLocked()
		c.waitMu.Unlock()
	}
}

// EncodeSnapshot encodes an image as a snapshot's data (quorum.Seed).
func EncodeSnapshot(img *metadata.Image) ([]byte, error) {
	return json.Marshal(snapshotData{Records: img.Records()})
}

// Bootstrap returns once the cluster has its first record, the cluster
// id: the active controller of a new cluster writes it (cfg.ClusterID, or
// a new id), and the other voters wait to apply it.
func (c *Controller) Bootstrap(ctx context.Context) error {
	for {
		c.waitMu.Lock()
		id, active, changed, failed := c.applied.ClusterID, c.activeTerm != 0, c.changed, c.failed
		c.waitMu.Unlock()
		if id != "" {
			return nil
		}
		if failed != nil {
			return failed
		}
		if active {
			_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
				if img.ClusterID != "" {
					return nil, nil
				}
				id := c.cfg.ClusterID
				if id == "" {
					id = metadata.NewUUID().String()
				}
				c.logger.Info("new cluster", "cluster.id", id)
				return append([]metadata.Record{{Cluster: &metadata.ClusterRecord{ClusterID: id}}}, metadata.BootstrapFeatures()...), nil
			})
			if err == nil || !IsNotController(err) {
				return err
			}
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("controller: waiting for the cluster's first record: %w", context.Cause(ctx))
		case <-c.stop:
			return errStopped
		}
	}
}

// ProducerIDBlockSize is how many producer ids one reservation takes, as in
// Kafka's ProducerIdsBlock.
const ProducerIDBlockSize = 1000

// AllocateProducerIDs reserves a block of producer ids and returns its
// first id. The reservation is committed before it returns, so ids are
// never handed out twice, even across restarts and controllers.
func (c *Controller) AllocateProducerIDs(ctx context.Context) (first int64, err error) {
	img, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		return []metadata.Record{{ProducerIDs: &metadata.ProducerIDsRecord{
			NodeID: c.cfg.NodeID, NextProducerID: img.NextProducerID + ProducerIDBlockSize,
		}}}, nil
	})
	if err != nil {
		return 0, err
	}
	return img.NextProducerID - ProducerIDBlockSize, nil
}

// IsNotController reports whether err means this node cannot take
// metadata changes now (not the active controller, or stopping).
func IsNotController(err error) bool { return errors.Is(err, kerr.NotController) }
