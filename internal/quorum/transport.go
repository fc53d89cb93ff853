package quorum

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Magic opens every Raft connection on the controller listener. Its first
// four bytes, read as a Kafka frame size, are far above any request size
// limit, so the listener tells Raft peers from Kafka clients by them.
var Magic = [8]byte{'S', 'T', 'R', 'A', 'F', 'T', 'v', '1'}

// hello is the first frame of a Raft connection.
type hello struct {
	NodeID    uint64 `json:"nodeId"`
	ClusterID string `json:"clusterId,omitempty"`
}

const (
	maxHelloBytes = 4 << 10
	dialTimeout   = 2 * time.Second
	writeTimeout  = 10 * time.Second
	helloTimeout  = 10 * time.Second
	maxBackoff    = time.Second // see transport.maxBackoff
	// peerQueue is how many messages wait for one peer; beyond it Raft's
	// messages are dropped (Raft retries what matters).
	peerQueue = 4096
)

// transport carries Raft messages between voters: one outbound connection
// per peer, written by its own goroutine from a queue, and inbound
// connections read by the controller listener's goroutines. A message is
// one frame: a 4-byte big-endian length, then the protobuf.
type transport struct {
	self     uint64
	voters   map[uint64]string // id → host:port
	maxFrame int
	cluster  func() string // this node's cluster id, "" before it has one
	deliver  func(m *pb.Message)
	// unreachable and snapshotDone report to Raft; they must not block.
	unreachable  func(id uint64)
	snapshotDone func(id uint64, ok bool)
	logger       *slog.Logger
	dial         func(network, addr string, timeout time.Duration) (net.Conn, error)
	// authenticate runs after Magic, before the hello; see
	// Config.Authenticate.
	authenticate func(conn net.Conn) error
	// minBackoff and maxBackoff bound the wait between failed dials of a
	// peer, which doubles from one to the other; 50 ms and maxBackoff
	// when zero. A peer that connects to us is redialed at once, whatever
	// the wait.
	minBackoff, maxBackoff time.Duration

	peers map[uint64]*peer
	stop  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	inbound map[net.Conn]struct{}
}

type peer struct {
	id    uint64
	addr  string
	queue chan *pb.Message
	// wake ends a wait between dials: the peer connected to us, so it is
	// up again.
	wake chan struct{}
}

// init readies the transport: after it, connections may be served
// (ServeConn can run before Start: the controller listener is open
// first), and their messages wait for the node's loop.
func (t *transport) init() {
	t.stop = make(chan struct{})
	t.peers = map[uint64]*peer{}
	t.inbound = map[net.Conn]struct{}{}
	if t.dial == nil {
		t.dial = net.DialTimeout
	}
	if t.minBackoff <= 0 {
		t.minBackoff = 50 * time.Millisecond
	}
	if t.maxBackoff <= 0 {
		t.maxBackoff = maxBackoff
	}
	for id, addr := range t.voters {
		if id != t.self {
			t.peers[id] = &peer{id: id, addr: addr, queue: make(chan *pb.Message, peerQueue), wake: make(chan struct{}, 1)}
		}
	}
}

// start runs a goroutine per peer that dials it and writes its queue.
func (t *transport) start() {
	for _, p := range t.peers {
		t.wg.Add(1)
		go t.runPeer(p)
	}
}

// close stops the peers' goroutines and closes inbound connections.
func (t *transport) close() {
	close(t.stop)
	t.mu.Lock()
	for c := range t.inbound {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// send queues messages to their peers without blocking.
func (t *transport) send(msgs []*pb.Message) {
	for _, m := range msgs {
		p, ok := t.peers[m.GetTo()]
		if !ok {
			continue
		}
		select {
		case p.queue <- m:
		default:
			t.unreachable(p.id)
			if m.GetType() == pb.MessageType_MsgSnap {
				t.snapshotDone(p.id, false)
			}
		}
	}
}

// runPeer keeps a connection to one peer and writes its queue to it.
// Between failed dials it waits, doubling the wait up to maxBackoff, or
// until the peer connects to us: a voter that restarted is redialed at
// once. Without that, a follower that had been backing off from a peer
// while it was down could not answer its vote request for up to a
// second, and the election took another round.
func (t *transport) runPeer(p *peer) {
	defer t.wg.Done()
	backoff := t.minBackoff
	for {
		conn, err := t.connect(p)
		if err != nil {
			t.logger.Debug("raft peer unreachable", "peer", p.id, "addr", p.addr, "err", err)
			// Drop what waited, then tell Raft: what it sends after
			// hearing of the failure waits for the next connection.
			t.drain(p)
			t.unreachable(p.id)
			select {
			case <-t.stop:
				return
			case <-p.wake:
				backoff = t.minBackoff
				continue
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, t.maxBackoff)
			continue
		}
		backoff = t.minBackoff
		// The peer never writes on this connection: a read that ends
		// means it is gone (the process died, or restarted). Notice at
		// once rather than at the next write, which the kernel would
		// take and lose: a follower writes to another follower only to
		// answer its vote request, and that answer must not be lost.
		gone := make(chan struct{})
		go func() {
			io.Copy(io.Discard, conn)
			close(gone)
		}()
		err = t.write(p, conn, gone)
		conn.Close()
		<-gone
		if err == nil {
			return // stopping
		}
		t.logger.Debug("raft connection lost", "peer", p.id, "err", err)
		t.unreachable(p.id)
	}
}

// drain drops what waits for an unreachable peer, so that Raft's retries
// of newer state are not stuck behind stale messages.
func (t *transport) drain(p *peer) {
	for {
		select {
		case m := <-p.queue:
			if m.GetType() == pb.MessageType_MsgSnap {
				t.snapshotDone(p.id, false)
			}
		default:
			return
		}
	}
}

func (t *transport) connect(p *peer) (net.Conn, error) {
	conn, err := t.dial("tcp", p.addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	var buf []byte
	if t.authenticate != nil {
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := conn.Write(Magic[:]); err != nil {
			conn.Close()
			return nil, err
		}
		if err := t.authenticate(conn); err != nil {
			conn.Close()
			return nil, err
		}
	} else {
		buf = append(buf, Magic[:]...)
	}
	h, _ := json.Marshal(hello{NodeID: t.self, ClusterID: t.cluster()})
	buf = append(buf, binary.BigEndian.AppendUint32(nil, uint32(len(h)))...)
	buf = append(buf, h...)
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write(buf); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// write sends the peer's queue until the connection fails or gone is
// closed (an error), or the transport stops (nil).
func (t *transport) write(p *peer, conn net.Conn, gone <-chan struct{}) error {
	w := bufio.NewWriterSize(conn, 64<<10)
	var frame []byte
	for {
		var m *pb.Message
		select {
		case <-t.stop:
			return nil
		case <-gone:
			return errPeerClosed
		case m = <-p.queue:
		}
		for {
			var err error
			frame, err = appendFrame(frame[:0], m)
			if err != nil {
				t.logger.Error("encoding a raft message", "type", m.GetType(), "err", err)
			} else if len(frame)-4 > t.maxFrame {
				t.logger.Warn("raft message larger than the frame limit, dropped", "type", m.GetType(), "bytes", len(frame), "limit", t.maxFrame)
			} else {
				conn.SetWriteDeadline(time.Now().Add(writeTimeout))
				if _, err := w.Write(frame); err != nil {
					if m.GetType() == pb.MessageType_MsgSnap {
						t.snapshotDone(p.id, false)
					}
					return err
				}
			}
			if m.GetType() == pb.MessageType_MsgSnap {
				if err := w.Flush(); err != nil {
					t.snapshotDone(p.id, false)
					return err
				}
				t.snapshotDone(p.id, true)
			}
			// Batch what is already queued into one write.
			select {
			case m = <-p.queue:
				continue
			default:
			}
			break
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

func appendFrame(dst []byte, m *pb.Message) ([]byte, error) {
	dst = append(dst, 0, 0, 0, 0)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return dst, err
	}
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst, nil
}

// errPeerClosed ends an outbound connection the peer closed.
var errPeerClosed = errors.New("quorum: the peer closed the connection")

// errDropped is returned for a connection the transport refuses.
var errDropped = errors.New("quorum: connection refused")

// serve reads Raft messages from an inbound connection whose magic has
// been read, until it fails or the transport stops. Connections from nodes
// that are not voters, or of another cluster, are dropped with a log line.
func (t *transport) serve(conn net.Conn, r *bufio.Reader) error {
	t.mu.Lock()
	select {
	case <-t.stop:
		t.mu.Unlock()
		conn.Close()
		return nil
	default:
	}
	t.inbound[conn] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.inbound, conn)
		t.mu.Unlock()
		conn.Close()
	}()

	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	data, err := readFrame(r, maxHelloBytes)
	if err != nil {
		return err
	}
	var h hello
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("quorum: bad hello from %s: %w", conn.RemoteAddr(), err)
	}
	if _, ok := t.voters[h.NodeID]; !ok || h.NodeID == t.self {
		t.logger.Warn("dropping raft connection from a node that is not a voter", "node", h.NodeID, "addr", conn.RemoteAddr().String())
		return errDropped
	}
	if ours := t.cluster(); ours != "" && h.ClusterID != "" && h.ClusterID != ours {
		t.logger.Warn("dropping raft connection from another cluster", "node", h.NodeID, "cluster.id", h.ClusterID, "ours", ours, "addr", conn.RemoteAddr().String())
		return errDropped
	}
	if p := t.peers[h.NodeID]; p != nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	conn.SetReadDeadline(time.Time{})
	for {
		data, err := readFrame(r, t.maxFrame)
		if err != nil {
			select {
			case <-t.stop:
				return nil
			default:
				return err
			}
		}
		m := new(pb.Message)
		if err := proto.Unmarshal(data, m); err != nil {
			return fmt.Errorf("quorum: bad message from node %d: %w", h.NodeID, err)
		}
		if m.GetFrom() != h.NodeID || m.GetTo() != t.self {
			t.logger.Warn("dropping raft message with wrong addresses", "node", h.NodeID, "from", m.GetFrom(), "to", m.GetTo())
			continue
		}
		t.deliver(m)
	}
}

// readFrame reads one length-prefixed frame, refusing one longer than max
// before allocating for it.
func readFrame(r *bufio.Reader, max int) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("quorum: frame of %d bytes exceeds the limit of %d", n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
