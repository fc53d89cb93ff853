package quorum

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// serveRaft accepts Raft connections on ln for t until ln closes.
func serveRaft(t *transport, ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r := bufio.NewReader(conn)
			var magic [8]byte
			if _, err := io.ReadFull(r, magic[:]); err != nil || magic != Magic {
				conn.Close()
				return
			}
			t.serve(conn, r)
		}()
	}
}

// TestTransportRedialsAPeerThatConnects: node 1 backs off from node 2
// while 2 is down, with a wait long enough that it would never dial again
// in the test; when 2 comes up and connects to 1, 1 dials 2 at once and
// the message it queued in the meantime arrives. Without that, a follower
// that backed off from a restarted peer could not answer its vote request
// for up to maxBackoff, and elections took another round.
func TestTransportRedialsAPeerThatConnects(t *testing.T) {
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	// Node 2's address, not listening yet.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr2 := ln2.Addr().String()
	ln2.Close()

	voters := map[uint64]string{1: ln1.Addr().String(), 2: addr2}
	var failed1 atomic.Int32
	var got2 atomic.Int32
	newTransport := func(self uint64, deliver func(*pb.Message)) *transport {
		tr := &transport{self: self, voters: voters, maxFrame: 1 << 20, cluster: func() string { return "" },
			deliver: deliver, unreachable: func(uint64) {}, snapshotDone: func(uint64, bool) {}, logger: quiet(),
			minBackoff: time.Hour, maxBackoff: time.Hour}
		if self == 1 {
			tr.unreachable = func(uint64) { failed1.Add(1) }
		}
		tr.init()
		return tr
	}
	t1 := newTransport(1, func(*pb.Message) {})
	t1.start()
	defer t1.close()
	go serveRaft(t1, ln1)
	// Node 1 fails to dial node 2 and backs off for an hour. A message
	// queued before the failure is dropped with it, so queue one only
	// once node 1 has reported node 2 unreachable.
	poll.Until(t, 30*time.Second, "node 1 to have failed to dial node 2", func() bool { return failed1.Load() >= 1 })
	t1.send([]*pb.Message{msg(pb.MsgHeartbeat, 1, 2)})

	ln2, err = net.Listen("tcp", addr2)
	if err != nil {
		t.Skipf("node 2's port was taken meanwhile: %v", err)
	}
	defer ln2.Close()
	t2 := newTransport(2, func(m *pb.Message) {
		if m.GetFrom() == 1 && m.GetType() == pb.MsgHeartbeat {
			got2.Add(1)
		}
	})
	t2.start()
	defer t2.close()
	go serveRaft(t2, ln2)
	// Node 2 speaks first: its connection tells node 1 it is up.
	t2.send([]*pb.Message{msg(pb.MsgHeartbeatResp, 2, 1)})
	poll.Until(t, 30*time.Second, "node 1's queued message at node 2", func() bool { return got2.Load() == 1 })
}

func msg(typ pb.MessageType, from, to uint64) *pb.Message {
	term := uint64(1)
	return &pb.Message{Type: &typ, From: &from, To: &to, Term: &term}
}

// TestTransportNoticesAPeerThatRestarts: node 1 has a connection to node
// 2 and nothing to send; node 2 restarts. Node 1 notices the closed
// connection at once and dials again, so the next message it sends, the
// answer to a vote request say, is not written into the dead connection
// and lost.
func TestTransportNoticesAPeerThatRestarts(t *testing.T) {
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	voters := map[uint64]string{1: ln1.Addr().String(), 2: ln2.Addr().String()}
	var dials1, got2 atomic.Int32
	newTransport := func(self uint64) *transport {
		tr := &transport{self: self, voters: voters, maxFrame: 1 << 20, cluster: func() string { return "" },
			deliver: func(m *pb.Message) {
				if self == 2 && m.GetFrom() == 1 {
					got2.Add(1)
				}
			},
			unreachable: func(uint64) {}, snapshotDone: func(uint64, bool) {}, logger: quiet()}
		if self == 1 {
			tr.dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
				dials1.Add(1)
				return net.DialTimeout(network, addr, timeout)
			}
		}
		tr.init()
		return tr
	}
	t1 := newTransport(1)
	t1.start()
	defer t1.close()
	go serveRaft(t1, ln1)
	t2 := newTransport(2)
	t2.start()
	go serveRaft(t2, ln2)
	t1.send([]*pb.Message{msg(pb.MsgHeartbeat, 1, 2)})
	poll.Until(t, 30*time.Second, "the first message at node 2", func() bool { return got2.Load() == 1 })
	if n := dials1.Load(); n != 1 {
		t.Fatalf("node 1 dialed node 2 %d times before the restart", n)
	}

	// Node 2 restarts on the same port.
	t2.close()
	ln2.Close()
	ln2, err = net.Listen("tcp", voters[2])
	if err != nil {
		t.Skipf("node 2's port was taken meanwhile: %v", err)
	}
	defer ln2.Close()
	got2.Store(0)
	t2 = newTransport(2)
	t2.start()
	defer t2.close()
	go serveRaft(t2, ln2)
	// Node 1 connected again, on its own: nothing was sent meanwhile. (A
	// message sent while it still failed to dial could be dropped with
	// the queue, and the test would not tell.)
	poll.Until(t, 30*time.Second, "node 1 connected to node 2 again", func() bool {
		t2.mu.Lock()
		defer t2.mu.Unlock()
		return len(t2.inbound) > 0
	})
	if dials1.Load() < 2 {
		t.Fatal("node 2 has a connection node 1 did not dial")
	}
	t1.send([]*pb.Message{msg(pb.MsgHeartbeat, 1, 2)})
	poll.Until(t, 30*time.Second, "the message after the restart at node 2", func() bool { return got2.Load() == 1 })
}
