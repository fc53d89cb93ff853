package quorum

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/wire"
)

// MetadataTopic is the metadata log's topic name on the wire.
const MetadataTopic = "__cluster_metadata"

// ObserverConfig configures an Observer.
type ObserverConfig struct {
	NodeID int32
	// Voters are the controllers' controller-listener addresses.
	Voters map[int32]string
	// MaxBytes bounds one fetch's entries (and one snapshot chunk); 1 MiB
	// when zero.
	MaxBytes int32
	// Wait is how long a fetch waits at the leader for new entries; 500
	// ms when zero.
	Wait   time.Duration
	Logger *slog.Logger
	// Dial connects to a voter; (&net.Dialer{}).DialContext when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Observer follows the committed metadata log without voting, as KRaft's
// brokers do: it fetches committed entries from the quorum's leader with
// Kafka's Fetch on __cluster_metadata-0 over the controller listener, and
// the leader's latest snapshot with FetchSnapshot when the entries it
// needs are compacted away. It keeps nothing on disk: a restarted observer
// loads the snapshot and the entries after it. It offers the same stream as
// a Node (Apply) and never leads.
type Observer struct {
	cfg   ObserverConfig
	apply chan Apply
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	// ctx ends with Close, ending a fetch under way.
	ctx    context.Context
	cancel context.CancelFunc

	clients map[int32]*wire.Client // the loop's
	voters  []int32

	mu      sync.Mutex
	commit  uint64 // the leader's commit index, as last fetched
	fetched chan struct{}
	leader  int32
}

// NewObserver returns an observer; Start runs it.
func NewObserver(cfg ObserverConfig) *Observer {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 500 * time.Millisecond
	}
	o := &Observer{cfg: cfg, apply: make(chan Apply, 16), stop: make(chan struct{}), done: make(chan struct{}),
		clients: map[int32]*wire.Client{}, fetched: make(chan struct{}), leader: -1}
	for id, addr := range cfg.Voters {
		o.voters = append(o.voters, id)
		o.clients[id] = wire.NewClient(addr, fmt.Sprintf("strata-observer-%d", cfg.NodeID))
		o.clients[id].Dial = cfg.Dial
	}
	slices.Sort(o.voters)
	o.ctx, o.cancel = context.WithCancel(context.Background())
	return o
}

// Start runs the observer until Close.
func (o *Observer) Start() { go o.run() }

// Close stops the observer.
func (o *Observer) Close() error {
	o.once.Do(func() {
		close(o.stop)
		o.cancel()
	})
	<-o.done
	for _, c := range o.clients {
		c.Close()
	}
	return nil
}

// Apply is the committed stream, in order.
func (o *Observer) Apply() <-chan Apply { return o.apply }

// Done is closed when the observer stops.
func (o *Observer) Done() <-chan struct{} { return o.done }

// Propose always fails: an observer does not lead.
func (o *Observer) Propose(context.Context, []byte) error { return ErrNotLeader }

// Snapshot does nothing: an observer keeps no log to compact.
func (o *Observer) Snapshot(Snapshot) {}

// Loaded is nothing: an observer starts empty.
func (o *Observer) Loaded() (Snapshot, uint64) { return Snapshot{}, 0 }

// ReadIndex returns the leader's commit index from a fetch answered after
// the call.
func (o *Observer) ReadIndex(ctx context.Context) (uint64, error) {
	o.mu.Lock()
	wait := o.fetched
	o.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-o.done:
		return 0, ErrStopped
	}
	// wait was closed by a fetch that started before the call, perhaps:
	// take the one after it.
	o.mu.Lock()
	wait = o.fetched
	o.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-o.done:
		return 0, ErrStopped
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.commit, nil
}

func (o *Observer) run() {
	defer close(o.done)
	next := uint64(1)
	backoff := 20 * time.Millisecond
	turn := 0
	for {
		select {
		case <-o.stop:
			return
		default:
		}
		o.mu.Lock()
		target := o.leader
		o.mu.Unlock()
		if target < 0 {
			target = o.voters[turn%len(o.voters)]
			turn++
		}
		n, err := o.fetchOnce(target, next)
		if err != nil {
			o.mu.Lock()
			if o.leader == target {
				o.leader = -1
			}
			o.mu.Unlock()
			o.cfg.Logger.Debug("fetching metadata", "from", target, "err", err)
			select {
			case <-o.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 20 * time.Millisecond
		next = n
	}
}

// errNotLeader is a fetch answered by a voter that does not lead.
var errNotLeader = errors.New("quorum: not the leader")

// fetchOnce fetches from one voter and hands what it got to Apply; it
// returns the next index to fetch.
func (o *Observer) fetchOnce(voter int32, next uint64) (uint64, error) {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 16
	req.ReplicaID = -1
	req.ReplicaState.ID, req.ReplicaState.Epoch = o.cfg.NodeID, -1
	req.MaxWaitMillis = int32(o.cfg.Wait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = o.cfg.MaxBytes
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = MetadataTopic, MetadataTopicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch = int64(next), o.cfg.MaxBytes, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.Wait+5*time.Second)
	defer cancel()
	resp, err := o.clients[voter].Request(ctx, req)
	if err != nil {
		return next, err
	}
	r := resp.(*kmsg.FetchResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		return next, fmt.Errorf("quorum: a metadata fetch answer without the partition (error %d)", r.ErrorCode)
	}
	p := r.Topics[0].Partitions[0]
	if p.ErrorCode == kerr.NotLeaderForPartition.Code {
		o.mu.Lock()
		o.leader = -1
		if p.CurrentLeader.LeaderID >= 0 {
			o.leader = p.CurrentLeader.LeaderID
		}
		o.mu.Unlock()
		return next, errNotLeader
	}
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return next, err
	}
	o.mu.Lock()
	o.leader = voter
	o.mu.Unlock()
	a := Apply{Leader: voter, Term: uint64(max(p.CurrentLeader.LeaderEpoch, 0))}
	if id := p.SnapshotID; id.EndOffset > 0 {
		snap, err := o.fetchSnapshot(ctx, voter, id.EndOffset, id.Epoch)
		if err != nil {
			return next, err
		}
		a.Snapshot = &snap
		next = snap.Index + 1
	}
	err = record.Batches(p.RecordBatches, func(h record.Header, batch []byte) bool {
		var e *Entry
		rerr := record.Records(batch, func(offset, _ int64, rec *kmsg.Record) error {
			pe, err := decodeEntry(offset, rec.Key, rec.Value)
			if err == nil && pe.GetType() == 0 {
				e = &Entry{Index: pe.GetIndex(), Term: pe.GetTerm(), Data: pe.GetData()}
			}
			return err
		})
		if rerr != nil {
			err = rerr
			return false
		}
		if uint64(h.BaseOffset) == next {
			if e != nil {
				a.Entries = append(a.Entries, *e)
			}
			next++
		}
		return true
	})
	if err != nil {
		return next, fmt.Errorf("quorum: decoding fetched metadata: %w", err)
	}
	if a.Snapshot != nil || len(a.Entries) > 0 {
		select {
		case o.apply <- a:
		case <-o.stop:
			return next, ErrStopped
		}
	}
	o.mu.Lock()
	if hw := p.HighWatermark; hw > 0 {
		o.commit = uint64(hw - 1)
	}
	close(o.fetched)
	o.fetched = make(chan struct{})
	o.mu.Unlock()
	return next, nil
}

// fetchSnapshot reads the leader's snapshot ending at endOffset, in
// chunks of MaxBytes.
func (o *Observer) fetchSnapshot(ctx context.Context, voter int32, endOffset int64, epoch int32) (Snapshot, error) {
	var data []byte
	for {
		req := kmsg.NewPtrFetchSnapshotRequest()
		req.Version = 1
		req.ReplicaID = o.cfg.NodeID
		req.MaxBytes = o.cfg.MaxBytes
		rt := kmsg.NewFetchSnapshotRequestTopic()
		rt.Topic = MetadataTopic
		rp := kmsg.NewFetchSnapshotRequestTopicPartition()
		rp.CurrentLeaderEpoch = -1
		rp.SnapshotID.EndOffset, rp.SnapshotID.Epoch = endOffset, epoch
		rp.Position = int64(len(data))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := o.clients[voter].Request(ctx, req)
		if err != nil {
			return Snapshot{}, err
		}
		r := resp.(*kmsg.FetchSnapshotResponse)
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return Snapshot{}, err
		}
		if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			return Snapshot{}, errors.New("quorum: a snapshot answer without the partition")
		}
		p := r.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return Snapshot{}, err
		}
		if p.Position != int64(len(data)) || p.Size < 0 || p.Size > 1<<31 {
			return Snapshot{}, fmt.Errorf("quorum: snapshot chunk at %d of %d, expected %d", p.Position, p.Size, len(data))
		}
		data = append(data, p.Bytes...)
		if int64(len(data)) >= p.Size {
			o.cfg.Logger.Info("metadata snapshot fetched", "index", endOffset-1, "bytes", len(data), "from", voter)
			return Snapshot{Index: uint64(endOffset - 1), Term: uint64(epoch), Data: data}, nil
		}
		if len(p.Bytes) == 0 {
			return Snapshot{}, errors.New("quorum: an empty snapshot chunk")
		}
	}
}

// MetadataTopicID is Kafka's fixed id of the metadata topic.
var MetadataTopicID = [16]byte{15: 1}
