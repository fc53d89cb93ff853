package strata

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/broker"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/vfs"
)

// ClusterOptions configure an in-process cluster.
type ClusterOptions struct {
	// Nodes is how many nodes; 3 when zero. Every node is a broker and a
	// voter of the metadata quorum (process.roles=broker,controller), ids
	// 1 to Nodes.
	Nodes int
	// Dir holds the nodes' data directories, Dir/node-1 and so on.
	// Required.
	Dir string
	// Settings are server properties with Kafka's names, applied to every
	// node after the cluster's own (see StartCluster).
	Settings map[string]string
	// Logger receives the nodes' logs, each with a "node" attribute;
	// discarded when nil.
	Logger *slog.Logger
}

// Cluster is a cluster of Strata nodes in this process: each node is the
// code `strata serve` runs, with its own data directory on the real file
// system, its own listeners on loopback, and real replication between the
// nodes over TCP. The nodes reach each other through a dialer that can cut
// pairs of them apart (Partition); Kafka clients reach them directly.
//
// Methods may be called concurrently.
type Cluster struct {
	opts ClusterOptions
	net  *faultNet

	mu    sync.Mutex
	nodes []*clusterNode // node id i at i-1
}

type clusterNode struct {
	id         int32
	dir        string
	clientAddr string // fixed at the first start, kept by restarts
	ctrlAddr   string
	sets       []string
	fs         *vfs.ErrorFS // the running node's; failed by Kill
	b          *broker.Broker
}

// StartCluster starts opts.Nodes nodes and returns once every broker is
// registered and unfenced, so that topics can be created at once.
//
// Beyond Kafka's defaults, the cluster sets what suits tests on one
// machine, each overridable through Settings: default.replication.factor,
// offsets.topic.replication.factor and transaction.state.log.replication.factor
// to min(3, Nodes) (so a topic created with replication factor -1 is
// replicated), broker.heartbeat.interval.ms=250 and
// broker.session.timeout.ms=3000 (a killed node's leaderships move within
// about three seconds), controller.quorum.election.timeout.ms=500,
// replica.fetch.backoff.ms=100, and no admin HTTP listener.
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("strata: ClusterOptions.Dir is required")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 1 || opts.Nodes > 64 {
		return nil, fmt.Errorf("strata: ClusterOptions.Nodes %d: want 1 to 64", opts.Nodes)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{opts: opts, net: newFaultNet()}
	var voters []string
	for i := range opts.Nodes {
		id := int32(i + 1)
		client, err := freeAddr()
		if err != nil {
			return nil, err
		}
		ctrl, err := freeAddr()
		if err != nil {
			return nil, err
		}
		n := &clusterNode{id: id, dir: filepath.Join(opts.Dir, fmt.Sprintf("node-%d", id)), clientAddr: client, ctrlAddr: ctrl}
		c.nodes = append(c.nodes, n)
		c.net.own(client, id)
		c.net.own(ctrl, id)
		voters = append(voters, fmt.Sprintf("%d@%s", id, ctrl))
	}
	rf := strconv.Itoa(min(3, opts.Nodes))
	defaults := map[string]string{
		"default.replication.factor":               rf,
		"offsets.topic.replication.factor":         rf,
		"transaction.state.log.replication.factor": rf,
		"transaction.state.log.min.isr":            strconv.Itoa(min(2, opts.Nodes)),
		"broker.heartbeat.interval.ms":             "250",
		"broker.session.timeout.ms":                "3000",
		"controller.quorum.election.timeout.ms":    "500",
		"replica.fetch.backoff.ms":                 "100",
	}
	for k, v := range opts.Settings {
		defaults[k] = v
	}
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, n := range c.nodes {
		n.sets = []string{
			"node.id=" + strconv.Itoa(int(n.id)),
			"process.roles=broker,controller",
			"log.dirs=" + n.dir,
			"listeners=PLAINTEXT://" + n.clientAddr + ",CONTROLLER://" + n.ctrlAddr,
			"controller.quorum.voters=" + strings.Join(voters, ","),
			"strata.admin.listener=",
		}
		for _, k := range keys {
			n.sets = append(n.sets, k+"="+defaults[k])
		}
	}
	// The nodes start together: a broker's start returns once it is
	// registered, which needs a quorum.
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("strata: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start opens and starts node n. c.mu must not be held.
func (c *Cluster) start(n *clusterNode) error {
	cfg, err := config.Load(config.LoadOptions{Sets: n.sets})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return fmt.Errorf("strata: %w", err)
	}
	fs := vfs.NewErrorFS(vfs.Default)
	b, err := broker.New(broker.Options{Config: cfg, Logger: c.opts.Logger.With("node", n.id), FS: fs, Dial: c.net.dialer(n.id)})
	if err != nil {
		return fmt.Errorf("strata: node %d: %w", n.id, err)
	}
	if err := b.Start(); err != nil {
		b.Close()
		return fmt.Errorf("strata: node %d: %w", n.id, err)
	}
	c.mu.Lock()
	n.b, n.fs = b, fs
	c.mu.Unlock()
	go c.stopFailed(n, b)
	return nil
}

// stopFailed stops node n when its log directory fails (FailDisk), as
// strata serve exits then, until it stops otherwise.
func (c *Cluster) stopFailed(n *clusterNode, b *broker.Broker) {
	select {
	case <-b.Failed():
	case <-b.Stopping():
		return
	}
	c.mu.Lock()
	current := n.b == b
	if current {
		n.b = nil
	}
	c.mu.Unlock()
	if current {
		c.opts.Logger.Error("log directory failed; node stopped", "node", n.id)
		b.Kill()
	}
}

// node returns node id, or an error naming the ids there are.
func (c *Cluster) node(id int32) (*clusterNode, error) {
	if id < 1 || int(id) > len(c.nodes) {
		return nil, fmt.Errorf("strata: no node %d (nodes 1 to %d)", id, len(c.nodes))
	}
	return c.nodes[id-1], nil
}

// Addrs are the nodes' client addresses, node 1's first: seed brokers for
// Kafka clients. They stay the same when nodes restart.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.clientAddr
	}
	return out
}

// Addr is node id's client address ("" when there is no such node).
func (c *Cluster) Addr(id int32) string {
	n, err := c.node(id)
	if err != nil {
		return ""
	}
	return n.clientAddr
}

// Running reports whether node id is up (started and not killed or
// stopped).
func (c *Cluster) Running(id int32) bool {
	n, err := c.node(id)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.b != nil
}

// take removes node id's broker from the cluster, for stopping it.
func (c *Cluster) take(id int32) (*clusterNode, *broker.Broker, error) {
	n, err := c.node(id)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := n.b
	if b == nil {
		return nil, nil, fmt.Errorf("strata: node %d is not running", id)
	}
	n.b = nil
	return n, b, nil
}

// Kill crashes node id, as near to SIGKILL as a node in this process
// comes: its file system first fails every write, sync, create, rename and
// removal (so nothing more reaches its files: no flush, no checkpoint, no
// clean-shutdown marker, and the next start recovers as after a crash),
// then its listeners and connections close at once, with no controlled
// shutdown and no hand-over of the quorum's leadership. Data written
// before the kill but not synced stays in the page cache, as it does when
// a process is killed (a power failure would lose it). The others notice
// as they would a dead process: broken connections and missed heartbeats
// (broker.session.timeout.ms).
func (c *Cluster) Kill(id int32) error {
	n, b, err := c.take(id)
	if err != nil {
		return err
	}
	for _, op := range []vfs.Op{vfs.OpCreate, vfs.OpOpen, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpRename, vfs.OpRemove, vfs.OpMkdirAll} {
		n.fs.Add(vfs.Fault{Op: op, Err: errKilled})
	}
	b.Kill()
	return nil
}

var errKilled = errors.New("strata: node killed")

// DiskFault is a failure of one node's disk, for Cluster.FailDisk.
type DiskFault int

// The disk faults.
const (
	// DiskFull fails every write, create, truncation and sync with ENOSPC,
	// as a full disk does.
	DiskFull DiskFault = iota + 1
	// SyncFails fails every fsync with EIO; writes still reach the page
	// cache, as on a disk that fails under the cache (the failure only
	// shows where the node syncs: log.flush.interval.messages=1 syncs
	// every append).
	SyncFails
)

func (d DiskFault) String() string {
	switch d {
	case DiskFull:
		return "disk full (ENOSPC)"
	case SyncFails:
		return "fsync fails (EIO)"
	}
	return fmt.Sprintf("DiskFault(%d)", int(d))
}

// FailDisk makes node id's disk fail from now on, until the node is
// restarted. The node takes the logs that hit the failure offline (a
// failed fsync is never retried as if nothing happened), asks the
// controller to fence it, the controller moves its leaderships to other
// in-sync replicas, and the node stops, as strata serve exits then (and
// Kafka halts when its last log directory fails); Restart starts it again
// on a working disk.
func (c *Cluster) FailDisk(id int32, fault DiskFault) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.b == nil {
		return fmt.Errorf("strata: node %d is not running", id)
	}
	switch fault {
	case DiskFull:
		for _, op := range []vfs.Op{vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate} {
			n.fs.Add(vfs.Fault{Op: op, Err: syscall.ENOSPC})
		}
	case SyncFails:
		n.fs.Add(vfs.Fault{Op: vfs.OpSync, Err: syscall.EIO})
	default:
		return fmt.Errorf("strata: unknown disk fault %d", int(fault))
	}
	return nil
}

// Stop stops node id cleanly, as SIGTERM stops `strata serve`: its
// leaderships move to other in-sync replicas first, and it hands the
// quorum's leadership over if it has it.
func (c *Cluster) Stop(id int32) error {
	_, b, err := c.take(id)
	if err != nil {
		return err
	}
	return b.Close()
}

// Restart starts node id again, killed or stopped, on the same data
// directory and addresses; it returns once the node is registered and
// unfenced. A killed node recovers its logs as after a crash.
func (c *Cluster) Restart(id int32) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	running := n.b != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("strata: node %d is running", id)
	}
	return c.start(n)
}

// Partition cuts nodes a and b apart, both ways, until Heal: their
// connections to each other (metadata quorum, controller requests,
// replication) close, and new ones are refused. Kafka clients still reach
// both.
func (c *Cluster) Partition(a, b int32) error {
	if _, err := c.node(a); err != nil {
		return err
	}
	if _, err := c.node(b); err != nil {
		return err
	}
	if a == b {
		return fmt.Errorf("strata: cannot partition node %d from itself", a)
	}
	c.net.cut(a, b)
	return nil
}

// Isolate cuts node id off from every other node.
func (c *Cluster) Isolate(id int32) error {
	for _, n := range c.nodes {
		if n.id != id {
			if err := c.Partition(id, n.id); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal undoes every Partition.
func (c *Cluster) Heal() { c.net.heal() }

// HeldResponse is the response to one request between two nodes, held
// back from the node that sent the request (HoldResponse).
type HeldResponse struct {
	pair        [2]int32
	apiKey      int16
	arrived     chan struct{}
	release     chan struct{}
	releaseOnce sync.Once
}

// Arrived is closed once the response's first bytes reached the
// requesting node, and are held: the other node has answered.
func (h *HeldResponse) Arrived() <-chan struct{} { return h.arrived }

// Release hands the response to the requesting node. It may be called
// more than once.
func (h *HeldResponse) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

// HoldResponse arms a hold on the next request with this Kafka API key
// that node from sends to node to on a connection between them (a
// broker's inter-broker client: a transaction's verification or its
// markers, say): the request goes through and is answered, but node from
// reads nothing more on that connection until Release. This orders
// events across nodes without timing them: what the test does between
// Arrived and Release happens after node to answered and before node from
// acts on the answer.
func (c *Cluster) HoldResponse(from, to int32, apiKey int16) (*HeldResponse, error) {
	if _, err := c.node(from); err != nil {
		return nil, err
	}
	if _, err := c.node(to); err != nil {
		return nil, err
	}
	h := &HeldResponse{pair: [2]int32{from, to}, apiKey: apiKey, arrived: make(chan struct{}), release: make(chan struct{})}
	c.net.mu.Lock()
	c.net.holds = append(c.net.holds, h)
	c.net.armed.Store(int32(len(c.net.holds)))
	c.net.mu.Unlock()
	return h, nil
}

// DelayRequests delays every request with this Kafka API key that a node
// sends another on a connection between them (a broker's inter-broker
// client: transaction markers, verifications, replica fetches) by d before
// it is written, as a slow or loaded link would; 0 undoes it. The
// connection carries nothing else meanwhile.
func (c *Cluster) DelayRequests(apiKey int16, d time.Duration) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if d <= 0 {
		delete(c.net.delays, apiKey)
	} else {
		c.net.delays[apiKey] = d
	}
	c.net.delayed.Store(int32(len(c.net.delays)))
}

// Leader returns the node that leads a topic's partition (-1 when it has
// none): of what the running nodes' metadata says, the answer with the
// highest leader epoch, so that a node cut off from the others, whose
// metadata is stale, does not mislead.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (int32, error) {
	var lastErr error
	leader, epoch := int32(-1), int32(-1)
	for _, n := range c.nodes {
		if !c.Running(n.id) {
			continue
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.clientAddr))
		if err != nil {
			return -1, err
		}
		// Straight to this node: kadm's Metadata would go to any broker.
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(n.id)))
		cl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, t := range resp.Topics {
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				lastErr = fmt.Errorf("strata: topic %s, as node %d sees it: %w", topic, n.id, err)
				continue
			}
			for _, p := range t.Partitions {
				if p.Partition == partition && p.LeaderEpoch > epoch {
					leader, epoch = p.Leader, p.LeaderEpoch
				}
			}
		}
	}
	if epoch >= 0 {
		return leader, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("strata: no running node knows partition %d of %s", partition, topic)
	}
	return -1, lastErr
}

// Close stops every running node, killing them (a test's cluster needs no
// clean shutdown, and a clean one of several nodes waits for each to move
// its leaderships away), and returns once they have stopped.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Kill(n.id)
		}()
	}
	wg.Wait()
	return nil
}

// faultNet is the network between the nodes: each node dials the others
// through it, and it refuses and closes connections between cut pairs.
// Addresses it does not know (Kafka clients are not its business) pass.
type faultNet struct {
	mu     sync.Mutex
	owners map[string]int32 // an address a node listens on → the node
	cuts   map[[2]int32]bool
	conns  map[[2]int32]map[*trackedConn]struct{}
	holds  []*HeldResponse // armed, not yet matched to a request
	// armed is len(holds), read without mu on every write.
	armed atomic.Int32
	// delays are DelayRequests', by API key; delayed is len(delays).
	delays  map[int16]time.Duration
	delayed atomic.Int32
}

func newFaultNet() *faultNet {
	return &faultNet{owners: map[string]int32{}, cuts: map[[2]int32]bool{}, conns: map[[2]int32]map[*trackedConn]struct{}{},
		delays: map[int16]time.Duration{}}
}

func (f *faultNet) own(addr string, id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.owners[addr] = id
}

// errPartitioned is the error a dial between cut nodes fails with.
var errPartitioned = errors.New("strata: nodes partitioned (Cluster.Partition)")

func (f *faultNet) dialer(from int32) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		f.mu.Lock()
		to, known := f.owners[addr]
		cut := known && f.cuts[[2]int32{from, to}]
		f.mu.Unlock()
		if cut {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil || !known {
			return conn, err
		}
		pair := [2]int32{from, to}
		tc := &trackedConn{Conn: conn, net: f, pair: pair}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cuts[pair] {
			conn.Close()
			return nil, &net.OpError{Op: "dial", Net: network, Err: errPartitioned}
		}
		if f.conns[pair] == nil {
			f.conns[pair] = map[*trackedConn]struct{}{}
		}
		f.conns[pair][tc] = struct{}{}
		return tc, nil
	}
}

func (f *faultNet) cut(a, b int32) {
	f.mu.Lock()
	var closing []*trackedConn
	for _, pair := range [][2]int32{{a, b}, {b, a}} {
		f.cuts[pair] = true
		for tc := range f.conns[pair] {
			closing = append(closing, tc)
		}
		delete(f.conns, pair)
	}
	f.mu.Unlock()
	for _, tc := range closing {
		tc.Conn.Close()
	}
}

func (f *faultNet) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cuts)
}

// trackedConn is a connection between two nodes, forgotten when closed.
type trackedConn struct {
	net.Conn
	net  *faultNet
	pair [2]int32
	once sync.Once
	// held is the hold matched by the last request written, for the
	// next read (a Kafka client reads a response only after writing its
	// request).
	held atomic.Pointer[HeldResponse]
}

// Write matches the request it carries against the armed holds. Kafka
// clients (kgo, which the nodes use) write each request whole, so the
// frame's header is at the start: size, API key.
func (t *trackedConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && t.net.delayed.Load() > 0 {
		key := int16(binary.BigEndian.Uint16(b[4:6]))
		t.net.mu.Lock()
		d := t.net.delays[key]
		t.net.mu.Unlock()
		if d > 0 {
			time.Sleep(d) // the fault: a slow link
		}
	}
	if len(b) >= 6 && t.net.armed.Load() > 0 {
		key := int16(binary.BigEndian.Uint16(b[4:6]))
		t.net.mu.Lock()
		for i, h := range t.net.holds {
			if h.pair == t.pair && h.apiKey == key {
				t.held.Store(h)
				t.net.holds = append(t.net.holds[:i], t.net.holds[i+1:]...)
				t.net.armed.Store(int32(len(t.net.holds)))
				break
			}
		}
		t.net.mu.Unlock()
	}
	return t.Conn.Write(b)
}

// Read holds the response to a held request until its release.
func (t *trackedConn) Read(b []byte) (int, error) {
	h := t.held.Swap(nil)
	if h == nil {
		return t.Conn.Read(b)
	}
	n, err := t.Conn.Read(b)
	close(h.arrived)
	<-h.release
	return n, err
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.net.mu.Lock()
		delete(t.net.conns[t.pair], t)
		t.net.mu.Unlock()
	})
	return t.Conn.Close()
}
