package quorum

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// Errors of Propose.
var (
	// ErrNotLeader is returned when this node does not lead the quorum;
	// only the leader takes proposals.
	ErrNotLeader = errors.New("quorum: not the leader")
	// ErrStopped is returned once the node is closed or has failed.
	ErrStopped = errors.New("quorum: node stopped")
)

// Config configures a Node.
type Config struct {
	// NodeID is this node's id (node.id); it must be among Voters. Node
	// ids are Kafka's (0 and up); Raft's are one more, as Raft reserves 0
	// for none.
	NodeID int32
	// Voters are the controllers' ids and controller-listener addresses
	// (controller.quorum.voters). They are fixed for the cluster's life.
	Voters map[int32]string
	// WAL is the log that holds the Raft entries (__cluster_metadata-0);
	// the quorum's other files live in its directory on FS.
	WAL *storage.Log
	FS  vfs.FS
	// TickInterval is Raft's tick; 100 ms when zero.
	TickInterval time.Duration
	// ElectionTimeout is controller.quorum.election.timeout.ms: a
	// follower that hears nothing from a leader for a random time in
	// [ElectionTimeout/2, ElectionTimeout) starts an election. 1 s when
	// zero.
	ElectionTimeout time.Duration
	// MaxFrameBytes bounds one Raft message on the wire (a snapshot is
	// one message); 128 MiB when zero.
	MaxFrameBytes int
	// ClusterID returns this node's cluster id, "" before it has one;
	// peers of another cluster are refused.
	ClusterID func() string
	// SnapshotKeep is how many entries a snapshot leaves in the log for
	// followers a little behind; 1000 when zero.
	SnapshotKeep uint64
	Logger       *slog.Logger
	Now          func() time.Time
	// Dial connects to a peer; net.DialTimeout when nil (tests put a
	// fault-injecting dialer here).
	Dial func(network, addr string, timeout time.Duration) (net.Conn, error)
	// Authenticate, when set, runs on each outbound connection after
	// Magic and before the hello: the controller listener's SASL exchange,
	// which the receiving side runs before it serves the connection (see
	// the package doc). An error drops the connection, which is redialed.
	Authenticate func(conn net.Conn) error
}

// Entry is a committed entry: its index, term and data (nil for the empty
// entry a new leader commits first).
type Entry struct {
	Index, Term uint64
	Data        []byte
}

// Snapshot is the state machine's state at Index.
type Snapshot struct {
	Index, Term uint64
	Data        []byte
}

// Apply is what the node hands to the state machine, in order: a snapshot
// to load, entries to apply, and the leader and term known when they were
// handed over.
type Apply struct {
	// Leader is the leader's node id, -1 when none is known.
	Leader int32
	Term   uint64
	// Commit is the commit index known then: the state machine is caught
	// up with the quorum once it has applied it while a leader is known.
	Commit   uint64
	Snapshot *Snapshot
	Entries  []Entry
}

// Node is one voter of the metadata quorum: etcd raft's RawNode, driven by
// one goroutine that persists, sends and hands over what each Ready holds.
type Node struct {
	cfg       Config
	logger    *slog.Logger
	rn        *raft.RawNode
	disk      *disk
	transport *transport

	recv    chan *pb.Message
	propose chan proposal
	report  chan func(rn *raft.RawNode)
	snaps   chan Snapshot
	status  chan chan Status
	apply   chan Apply

	// reads are ReadIndex requests waiting for their ReadState, by
	// request context; readSeq numbers them. The loop owns both.
	reads   map[string]chan uint64
	readSeq uint64
	readReq chan readRequest
	// unsentReads are the keys of reads asked while no leader was known,
	// which Raft would drop: they go to Raft when a leader is known.
	unsentReads []string

	// commit is the commit index, for readers of the committed log
	// (observers' fetches); committed is closed and replaced when it
	// moves. commitMu guards both.
	commitMu  sync.Mutex
	commit    uint64
	committed chan struct{}
	// pubTerm, pubLeader and pubLead are the term, whether this node
	// leads and which node does (raft's id, 0 for none), as of the last
	// Ready; commitMu guards them.
	pubTerm   uint64
	pubLeader bool
	pubLead   uint64

	// loaded and loadedCommit are what Open found on disk.
	loaded       Snapshot
	loadedCommit uint64

	// lastContact is when each peer was last heard from; the loop owns it.
	lastContact map[uint64]time.Time
	lead, term  uint64

	stop     chan struct{}
	done     chan struct{}
	failOnce sync.Once
	err      error // why the loop stopped, once done is closed
}

type readRequest struct {
	done chan uint64
}

type proposal struct {
	data []byte
	done chan error
}

// Open loads a node's durable state. Start runs it.
func Open(cfg Config) (*Node, error) {
	if _, ok := cfg.Voters[cfg.NodeID]; !ok || cfg.NodeID < 0 {
		return nil, fmt.Errorf("quorum: node %d is not among the voters", cfg.NodeID)
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = time.Second
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = 128 << 20
	}
	if cfg.SnapshotKeep == 0 {
		cfg.SnapshotKeep = 1000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClusterID == nil {
		cfg.ClusterID = func() string { return "" }
	}
	voters := make([]uint64, 0, len(cfg.Voters))
	addrs := map[uint64]string{}
	for id, addr := range cfg.Voters {
		voters = append(voters, raftID(id))
		addrs[raftID(id)] = addr
	}
	slices.Sort(voters)
	d, err := openDisk(cfg.FS, cfg.WAL, &pb.ConfState{Voters: voters}, cfg.Logger, cfg.Now)
	if err != nil {
		return nil, err
	}
	snap, _ := d.mem.Snapshot()
	// Raft's election timeout is random in [ElectionTick, 2*ElectionTick)
	// ticks.
	electionTicks := max(2, int(cfg.ElectionTimeout/cfg.TickInterval/2))
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        raftID(cfg.NodeID),
		ElectionTick:              electionTicks,
		HeartbeatTick:             1,
		Storage:                   d.mem,
		Applied:                   snap.GetMetadata().GetIndex(),
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  16 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		Logger:                    raftLogger{cfg.Logger},
	})
	if err != nil {
		return nil, fmt.Errorf("quorum: %w", err)
	}
	n := &Node{
		cfg: cfg, logger: cfg.Logger, rn: rn, disk: d,
		recv:        make(chan *pb.Message, 1024),
		propose:     make(chan proposal),
		report:      make(chan func(*raft.RawNode), 1024),
		snaps:       make(chan Snapshot, 1),
		status:      make(chan chan Status),
		apply:       make(chan Apply, 16),
		lastContact: map[uint64]time.Time{},
		reads:       map[string]chan uint64{},
		committed:   make(chan struct{}),
		readReq:     make(chan readRequest),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	md := snap.GetMetadata()
	n.loaded = Snapshot{Index: md.GetIndex(), Term: md.GetTerm(), Data: snap.GetData()}
	n.loadedCommit = d.hard.GetCommit()
	n.transport = &transport{
		self: raftID(cfg.NodeID), voters: addrs, maxFrame: cfg.MaxFrameBytes, cluster: cfg.ClusterID,
		deliver: n.deliver, logger: cfg.Logger, dial: cfg.Dial, authenticate: cfg.Authenticate,
		unreachable: func(id uint64) { n.reportAsync(func(rn *raft.RawNode) { rn.ReportUnreachable(id) }) },
		snapshotDone: func(id uint64, ok bool) {
			n.reportAsync(func(rn *raft.RawNode) { rn.ReportSnapshot(id, snapshotStatus(ok)) })
		},
	}
	n.transport.init()
	return n, nil
}

func snapshotStatus(ok bool) raft.SnapshotStatus {
	if ok {
		return raft.SnapshotFinish
	}
	return raft.SnapshotFailure
}

// Start runs the node until Close. A single voter elects itself at once
// rather than after an election timeout, and so does the lowest voter of a
// brand-new quorum (nothing in its log, term 0), so that a cluster started
// together has a leader as soon as a majority is up; PreVote keeps that
// campaign from disturbing a quorum that already has a leader.
func (n *Node) Start() {
	n.transport.start()
	if len(n.cfg.Voters) == 1 || n.brandNewLowest() {
		if err := n.rn.Campaign(); err != nil {
			n.logger.Warn("raft campaign", "err", err)
		}
	}
	go n.run()
}

// brandNewLowest reports whether this node has the lowest id of the voters
// and has never seen a term or an entry.
func (n *Node) brandNewLowest() bool {
	for id := range n.cfg.Voters {
		if id < n.cfg.NodeID {
			return false
		}
	}
	last, err := n.disk.mem.LastIndex()
	return err == nil && n.rn.BasicStatus().GetTerm() == 0 && last == 0
}

// Close stops the node and its transport. What was persisted stays.
func (n *Node) Close() error {
	n.failOnce.Do(func() {
		close(n.stop)
		<-n.done
		n.transport.close()
	})
	<-n.done
	if errors.Is(n.err, ErrStopped) {
		return nil
	}
	return n.err
}

// Done is closed when the node stops, by Close or because it failed to
// persist its state (Err says why).
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is why the node stopped; nil before Done is closed.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Apply returns the stream of what the state machine applies, in order. It
// must be read promptly: the node waits for it.
func (n *Node) Apply() <-chan Apply { return n.apply }

// Propose hands data to Raft as one entry. It returns ErrNotLeader unless
// this node leads; a nil error means Raft took the entry, not that it is
// committed: it is committed when it comes out of Apply.
func (n *Node) Propose(ctx context.Context, data []byte) error {
	p := proposal{data: data, done: make(chan error, 1)}
	select {
	case n.propose <- p:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return ErrStopped
	}
	select {
	case err := <-p.done:
		return err
	case <-n.done:
		return ErrStopped
	}
}

// ReadIndex returns the quorum's commit index as the leader confirms it
// with a majority now (Raft's ReadIndex): once the state machine has
// applied it, it is as current as any node's was when ReadIndex was
// called. It waits for a leader, up to ctx.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	for {
		// Raft drops a read it cannot serve (no leader yet): ask again
		// a few times per election timeout.
		attempt, cancel := context.WithTimeout(ctx, max(n.cfg.ElectionTimeout/5, 2*n.cfg.TickInterval))
		index, err := n.readIndexOnce(attempt)
		cancel()
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrStopped) {
			return index, err
		}
	}
}

func (n *Node) readIndexOnce(ctx context.Context) (uint64, error) {
	r := readRequest{done: make(chan uint64, 1)}
	select {
	case n.readReq <- r:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-n.done:
		return 0, ErrStopped
	}
	select {
	case index := <-r.done:
		return index, nil
	case <-ctx.Done():
		// The request stays in the loop's map until Raft answers or the
		// leader changes.
		return 0, ctx.Err()
	case <-n.done:
		return 0, ErrStopped
	}
}

// Snapshot asks the node to record a snapshot of the state machine at an
// applied index and compact the log behind it. It does not block; a
// request made while another waits replaces it.
func (n *Node) Snapshot(s Snapshot) {
	for {
		select {
		case n.snaps <- s:
			return
		default:
		}
		select {
		case <-n.snaps:
		default:
		}
	}
}

// ServeConn reads a Raft peer's connection whose Magic has been read from
// r. It returns when the connection fails or the node stops.
func (n *Node) ServeConn(conn net.Conn, r *bufio.Reader) error { return n.transport.serve(conn, r) }

func (n *Node) deliver(m *pb.Message) {
	select {
	case n.recv <- m:
	default: // the loop is behind: Raft retries
	}
}

func (n *Node) reportAsync(fn func(*raft.RawNode)) {
	select {
	case n.report <- fn:
	default:
	}
}

// fail stops the loop with err.
func (n *Node) fail(err error) {
	n.err = err
	n.logger.Error("metadata quorum stopped", "err", err)
}

func (n *Node) run() {
	defer close(n.done)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	// A single voter's campaign completes here, before any request is
	// served: a candidate drops reads.
	if err := n.handleReady(); err != nil {
		n.fail(err)
		return
	}
	for {
		select {
		case <-n.stop:
			n.err = ErrStopped
			if err := n.disk.saveHardState(n.rn.BasicStatus().HardState, true); err != nil {
				n.logger.Warn("writing the quorum state at shutdown", "err", err)
			}
			return
		case <-ticker.C:
			n.rn.Tick()
		case m := <-n.recv:
			n.lastContact[m.GetFrom()] = n.cfg.Now()
			if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
				n.logger.Debug("raft step", "type", m.GetType(), "from", m.GetFrom(), "err", err)
			}
		case p := <-n.propose:
			p.done <- n.proposeLocked(p.data)
		case fn := <-n.report:
			fn(n.rn)
		case s := <-n.snaps:
			if err := n.disk.snapshot(s.Index, s.Data, n.cfg.SnapshotKeep); err != nil {
				n.fail(fmt.Errorf("quorum: snapshot at %d: %w", s.Index, err))
				return
			}
			n.logger.Info("metadata snapshot", "index", s.Index, "bytes", len(s.Data))
		case q := <-n.status:
			q <- n.statusLocked()
		case r := <-n.readReq:
			n.readSeq++
			key := strconv.FormatUint(n.readSeq, 10)
			n.reads[key] = r.done
			if n.lead == 0 {
				n.unsentReads = append(n.unsentReads, key)
			} else {
				n.rn.ReadIndex([]byte(key))
			}
		}
		if err := n.handleReady(); err != nil {
			n.fail(err)
			return
		}
	}
}

func (n *Node) proposeLocked(data []byte) error {
	if n.rn.BasicStatus().RaftState != raft.StateLeader {
		return ErrNotLeader
	}
	if err := n.rn.Propose(data); err != nil {
		if errors.Is(err, raft.ErrProposalDropped) {
			return ErrNotLeader
		}
		return err
	}
	return nil
}

// handleReady persists, sends and hands over every pending Ready.
func (n *Node) handleReady() error {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		if err := n.disk.save(&rd); err != nil {
			return err
		}
		n.transport.send(rd.Messages)
		for _, rs := range rd.ReadStates {
			if ch, ok := n.reads[string(rs.RequestCtx)]; ok {
				ch <- rs.Index
				delete(n.reads, string(rs.RequestCtx))
			}
		}
		a := Apply{}
		st := n.rn.BasicStatus()
		oldLead := n.lead
		changed := st.Lead != n.lead || st.GetTerm() != n.term
		n.lead, n.term = st.Lead, st.GetTerm()
		if changed && oldLead != 0 {
			// Reads a deposed leader took are never answered.
			clear(n.reads)
		}
		if changed {
			n.logger.Info("metadata quorum leader", "leader", nodeID(n.lead), "term", n.term, "self", n.cfg.NodeID)
		}
		if n.lead != 0 && len(n.unsentReads) > 0 {
			// Read at once rather than at the reader's next retry.
			for _, key := range n.unsentReads {
				if _, ok := n.reads[key]; ok {
					n.rn.ReadIndex([]byte(key))
				}
			}
			n.unsentReads = nil
		}
		a.Leader, a.Term = nodeID(n.lead), n.term
		if s := rd.Snapshot; s != nil && !raft.IsEmptySnap(s) {
			md := s.GetMetadata()
			a.Snapshot = &Snapshot{Index: md.GetIndex(), Term: md.GetTerm(), Data: s.GetData()}
		}
		for _, e := range rd.CommittedEntries {
			switch e.GetType() {
			case pb.EntryNormal:
				a.Entries = append(a.Entries, Entry{Index: e.GetIndex(), Term: e.GetTerm(), Data: e.GetData()})
			default:
				// Voters are fixed: bootstrap puts them in the first
				// snapshot, never in conf-change entries.
				n.logger.Warn("ignoring a raft configuration change entry", "index", e.GetIndex())
			}
		}
		n.commitMu.Lock()
		if commit := st.GetCommit(); commit != n.commit {
			n.commit = commit
			close(n.committed)
			n.committed = make(chan struct{})
		}
		n.pubTerm, n.pubLeader, n.pubLead = n.term, n.lead == raftID(n.cfg.NodeID), n.lead
		n.commitMu.Unlock()
		if changed || a.Snapshot != nil || len(a.Entries) > 0 {
			select {
			case n.apply <- a:
			case <-n.stop:
				return ErrStopped
			}
		}
		n.rn.Advance(rd)
	}
	return nil
}

// Status is the quorum as this node sees it.
type Status struct {
	// NodeID is this node; Leader the leader (-1: none known).
	NodeID, Leader int32
	Term           uint64
	// Commit is the highest committed index (the metadata log's high
	// watermark); LastIndex this node's last entry.
	Commit, LastIndex uint64
	// Voters lists every voter, with what this node knows of it; only
	// the leader knows its followers' progress.
	Voters []VoterStatus
}

// VoterStatus is one voter's progress as the leader tracks it.
type VoterStatus struct {
	NodeID int32
	// Match is the last index known to be in the voter's log (0 when
	// unknown).
	Match uint64
	// LastContact is when this node last heard from it (zero: never;
	// this node itself: now).
	LastContact time.Time
}

// Status returns the quorum's state; it waits for the node's loop.
func (n *Node) Status(ctx context.Context) (Status, error) {
	q := make(chan Status, 1)
	select {
	case n.status <- q:
	case <-ctx.Done():
		return Status{}, ctx.Err()
	case <-n.done:
		return Status{}, ErrStopped
	}
	select {
	case s := <-q:
		return s, nil
	case <-n.done:
		return Status{}, ErrStopped
	}
}

func (n *Node) statusLocked() Status {
	st := n.rn.Status()
	last, _ := n.disk.mem.LastIndex()
	s := Status{NodeID: n.cfg.NodeID, Leader: nodeID(st.Lead), Term: st.GetTerm(), Commit: st.GetCommit(), LastIndex: last}
	for _, id := range n.disk.conf.GetVoters() {
		v := VoterStatus{NodeID: nodeID(id), LastContact: n.lastContact[id]}
		if id == raftID(n.cfg.NodeID) {
			v.Match, v.LastContact = last, n.cfg.Now()
		} else if pr, ok := st.Progress[id]; ok {
			v.Match = pr.Match
		}
		s.Voters = append(s.Voters, v)
	}
	return s
}

// raftLogger sends etcd raft's log lines to slog: debug and info at debug
// (Raft is chatty about elections), warnings and errors as they are.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                 { r.l.Debug("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any) { r.l.Debug("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Info(v ...any)                  { r.l.Debug("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any)  { r.l.Debug("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)               { r.l.Warn("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.l.Warn("raft: " + fmt.Sprintf(format, v...))
}
func (r raftLogger) Error(v ...any)                 { r.l.Error("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) { r.l.Error("raft: " + fmt.Sprintf(format, v...)) }
func (r raftLogger) Fatal(v ...any)                 { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any) { r.Panicf(format, v...) }
func (r raftLogger) Panic(v ...any)                 { panic("raft: " + fmt.Sprint(v...)) }
func (r raftLogger) Panicf(format string, v ...any) { panic("raft: " + fmt.Sprintf(format, v...)) }

// Committed is what ReadCommitted returns.
type Committed struct {
	// Batches are the entries from the offset asked for on, as stored in
	// the log (one record batch per entry), all committed.
	Batches []byte
	// Commit is the commit index: the offset of the last committed entry.
	Commit uint64
	// Term is this node's term, and Leader whether it leads.
	Term   uint64
	Leader bool
	// Snapshot, when set, says the entries asked for are compacted away:
	// read the snapshot (Checkpoint) instead.
	Snapshot *Snapshot
}

// ReadCommitted returns committed entries from index from on, at most
// maxBytes of them (at least one entry when there is any), waiting up to
// wait for the commit index to pass from. It may run concurrently with
// the node: it reads the log's durable files.
func (n *Node) ReadCommitted(ctx context.Context, from uint64, maxBytes int, wait time.Duration) (Committed, error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		n.commitMu.Lock()
		commit, moved := n.commit, n.committed
		out := Committed{Commit: commit, Term: n.pubTerm, Leader: n.pubLeader}
		n.commitMu.Unlock()
		snap, _ := n.disk.mem.Snapshot()
		if md := snap.GetMetadata(); from <= md.GetIndex() || int64(from) < n.cfg.WAL.LogStartOffset() {
			out.Snapshot = &Snapshot{Index: md.GetIndex(), Term: md.GetTerm()}
			return out, nil
		}
		if from <= commit {
			var buf []byte
			err := n.cfg.WAL.ReadBatches(int64(from), maxBytes, func(h record.Header, batch []byte) bool {
				if uint64(h.BaseOffset) > commit {
					return false
				}
				buf = append(buf, batch...)
				return true
			})
			out.Batches = buf
			return out, err
		}
		select {
		case <-moved:
		case <-deadline.C:
			return out, nil
		case <-ctx.Done():
			return out, ctx.Err()
		case <-n.done:
			return out, ErrStopped
		}
	}
}

// Checkpoint returns the latest snapshot, data included.
func (n *Node) Checkpoint() Snapshot {
	snap, _ := n.disk.mem.Snapshot()
	md := snap.GetMetadata()
	return Snapshot{Index: md.GetIndex(), Term: md.GetTerm(), Data: snap.GetData()}
}

// raftID is a node id's Raft id; nodeID the reverse (Raft's 0, none,
// is -1).
func raftID(id int32) uint64 { return uint64(id) + 1 }
func nodeID(id uint64) int32 { return int32(id) - 1 }

// Loaded returns the state machine's starting point, as Open found it on
// disk: the latest snapshot (index 0 and no data for a new node) and the
// commit index known then. Apply hands over the entries after the
// snapshot, up to that commit index first.
func (n *Node) Loaded() (Snapshot, uint64) { return n.loaded, n.loadedCommit }

// TransferLeadership hands the leadership, if this node has it, to the
// voter most caught up, and waits until this node knows another node leads
// (not merely that it stepped down) or ctx ends. A
// voter that stops cleanly does this first, so the quorum elects at once
// rather than after an election timeout.
func (n *Node) TransferLeadership(ctx context.Context) error {
	st, err := n.Status(ctx)
	if err != nil || st.Leader != n.cfg.NodeID || len(st.Voters) < 2 {
		return err
	}
	var to int32 = -1
	var best uint64
	for _, v := range st.Voters {
		if v.NodeID != n.cfg.NodeID && (to < 0 || v.Match > best) {
			to, best = v.NodeID, v.Match
		}
	}
	select {
	case n.report <- func(rn *raft.RawNode) { rn.TransferLeader(raftID(to)) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.done:
		return ErrStopped
	}
	for {
		n.commitMu.Lock()
		lead, moved := n.pubLead, n.committed
		n.commitMu.Unlock()
		if lead != 0 && lead != raftID(n.cfg.NodeID) {
			n.logger.Info("metadata quorum leadership handed over", "to", nodeID(lead))
			return nil
		}
		select {
		case <-moved:
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			return ErrStopped
		}
	}
}
