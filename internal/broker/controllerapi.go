package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/wire"
)

// The controller listener (controller.listener.names, e.g. CONTROLLER://:9093)
// carries two protocols on one port, in TLS and authenticated with SASL as
// its security protocol says (controllersecurity.go): the metadata quorum's Raft messages
// (a connection that opens with quorum.Magic) and the Kafka protocol for
// the controller's APIs, which brokers send to the active controller:
// BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds,
// DescribeQuorum, and the admin requests brokers forward for their clients
// (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
// IncrementalAlterConfigs, AlterPartitionReassignments,
// ListPartitionReassignments). A voter that is not the active controller
// answers them NOT_CONTROLLER, and the broker tries the leader the quorum
// names.

func init() {
	registerController(api{key: kmsg.ApiVersions, min: 0, max: 4, handle: (*Broker).handleControllerApiVersions,
		authorize: authorizeNothing, errors: apiVersionsErrors})
	registerController(api{key: kmsg.BrokerRegistration, min: 0, max: 4, handle: (*Broker).handleBrokerRegistration,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.BrokerRegistrationResponse)
			out.ErrorCode, out.BrokerEpoch = code, -1
		}})
	registerController(api{key: kmsg.BrokerHeartbeat, min: 0, max: 2, handle: (*Broker).handleBrokerHeartbeat,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.BrokerHeartbeatResponse)
			out.ErrorCode, out.IsFenced = code, true
		}})
	registerController(api{key: kmsg.AlterPartition, min: 2, max: 3, handle: (*Broker).handleAlterPartition,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.AlterPartitionResponse).ErrorCode = code
		}})
	registerController(api{key: kmsg.AllocateProducerIDs, min: 0, max: 0, handle: (*Broker).handleAllocateProducerIDs,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.AllocateProducerIDsResponse).ErrorCode = code
		}})
	registerController(api{key: kmsg.Fetch, min: 12, max: 16, handle: (*Broker).handleMetadataFetch,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(req kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.FetchResponse).ErrorCode = code
			fetchErrors(req, resp, code)
		}})
	registerController(api{key: kmsg.FetchSnapshot, min: 0, max: 1, handle: (*Broker).handleFetchSnapshot,
		authorize: controllerRule(auth.OpClusterAction),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.FetchSnapshotResponse).ErrorCode = code
		}})
}

// controllerHandler is the controller listener's wire.Handler.
type controllerHandler struct{ b *Broker }

func (h controllerHandler) Versions() map[int16]wire.VersionRange { return versionsOf(controllerAPIs) }

// Handle authenticates the connection (on a SASL controller listener)
// and authorizes the request (controllersecurity.go) before its handler.
func (h controllerHandler) Handle(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	s, resp, done := h.b.admit(ctx, c, req)
	if done {
		return resp
	}
	a, ok := controllerAPIs[req.Key]
	if !ok {
		panic(fmt.Sprintf("broker: invariant: controller request for unregistered API key %d", req.Key))
	}
	return h.b.authorizeController(ctx, c, s, a, req)
}

// serveControllerListener accepts the controller listener's connections
// until it is closed, handing Raft connections to the quorum node and the
// rest to the controller's Kafka-protocol server.
func (b *Broker) serveControllerListener(ln net.Listener, kafka *chanListener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			kafka.Close()
			return
		}
		go func() {
			r := bufio.NewReader(conn)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			head, err := r.Peek(len(quorum.Magic))
			conn.SetReadDeadline(time.Time{})
			if err == nil && [8]byte(head) == quorum.Magic {
				r.Discard(len(quorum.Magic))
				node := b.raft.Load()
				if node == nil {
					conn.Close() // not open yet: the peer dials again
					return
				}
				p, err := b.admitRaft(conn, r)
				if err != nil {
					b.logger.Warn("refusing a raft connection", "remote", conn.RemoteAddr().String(), "err", err)
					conn.Close()
					return
				}
				defer b.watchRaft(conn, p)()
				if err := node.ServeConn(conn, r); err != nil && !errors.Is(err, io.EOF) {
					b.logger.Debug("raft connection closed", "remote", conn.RemoteAddr().String(), "err", err)
				}
				return
			}
			if err != nil && len(head) == 0 {
				conn.Close()
				return
			}
			kafka.deliver(handOver(conn, r))
		}()
	}
}

// peekedConn is a connection whose first bytes were read into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener is a net.Listener fed by another accept loop.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// BrokerRegistration: v0-4, on the controller listener.
func (b *Broker) handleBrokerRegistration(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.BrokerRegistrationRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.BrokerRegistrationResponse)
		resp.BrokerEpoch = -1
		if id := b.ClusterID(); id != "" && r.ClusterID != "" && r.ClusterID != id {
			resp.ErrorCode = kerr.InconsistentClusterID.Code
			b.logger.Warn("refusing the registration of a broker of another cluster", "node", r.BrokerID, "cluster.id", r.ClusterID)
			return resp
		}
		reg := controller.Registration{NodeID: r.BrokerID, IncarnationID: metadata.UUID(r.IncarnationID), PreviousBrokerEpoch: r.PreviousBrokerEpoch}
		if r.Rack != nil {
			reg.Rack = *r.Rack
		}
		for _, l := range r.Listeners {
			reg.Listeners = append(reg.Listeners, metadata.Endpoint{Name: l.Name, Host: l.Host, Port: int32(l.Port)})
		}
		for _, f := range r.Features {
			reg.Features = append(reg.Features, metadata.Feature{Name: f.Name, MinLevel: f.MinSupportedVersion, MaxLevel: f.MaxSupportedVersion})
		}
		epoch, err := b.controller.RegisterBroker(ctx, reg)
		resp.ErrorCode, resp.BrokerEpoch = errorCode(err), epoch
		if err == nil {
			b.logger.Info("broker registered", "node", r.BrokerID, "epoch", epoch)
		}
		return resp
	})
}

// BrokerHeartbeat: v0-2, on the controller listener.
func (b *Broker) handleBrokerHeartbeat(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.BrokerHeartbeatRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
		reply, err := b.controller.Heartbeat(ctx, controller.Heartbeat{
			NodeID: r.BrokerID, Epoch: r.BrokerEpoch, MetadataOffset: r.CurrentMetadataOffset,
			WantFence: r.WantFence, WantShutDown: r.WantShutdown,
		})
		resp.ErrorCode = errorCode(err)
		resp.IsCaughtUp, resp.IsFenced, resp.ShouldShutdown = reply.IsCaughtUp, reply.IsFenced, reply.ShouldShutDown
		if err != nil {
			resp.IsFenced = true
		}
		return resp
	})
}

// AlterPartition: v2-3 (topic ids), on the controller listener.
func (b *Broker) handleAlterPartition(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AlterPartitionRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AlterPartitionResponse)
		img := b.image.Load()
		for _, rt := range r.Topics {
			st := kmsg.NewAlterPartitionResponseTopic()
			st.TopidID = rt.TopicID
			t := img.TopicsByID[metadata.UUID(rt.TopicID)]
			for _, rp := range rt.Partitions {
				sp := kmsg.NewAlterPartitionResponseTopicPartition()
				sp.Partition = rp.Partition
				if t == nil {
					sp.ErrorCode = kerr.UnknownTopicID.Code
					st.Partitions = append(st.Partitions, sp)
					continue
				}
				isr := rp.NewISR
				if r.Version >= 3 {
					isr = nil
					for _, e := range rp.NewEpochISR {
						isr = append(isr, e.BrokerID)
					}
				}
				res, err := b.controller.AlterPartition(ctx, controller.PartitionAlter{
					Topic: t.Name, Partition: rp.Partition, Leader: r.BrokerID, BrokerEpoch: r.BrokerEpoch,
					LeaderEpoch: rp.LeaderEpoch, PartitionEpoch: rp.PartitionEpoch, NewISR: isr,
				})
				sp.ErrorCode = errorCode(err)
				sp.LeaderID, sp.LeaderEpoch, sp.ISR, sp.PartitionEpoch = res.Leader, res.LeaderEpoch, res.ISR, res.PartitionEpoch
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	})
}

// AllocateProducerIds: v0, on the controller listener.
func (b *Broker) handleAllocateProducerIDs(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AllocateProducerIDsRequest)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
		first, err := b.controller.AllocateProducerIDs(ctx)
		resp.ErrorCode = errorCode(err)
		if err == nil {
			resp.ProducerIDStart, resp.ProducerIDLen = first, controller.ProducerIDBlockSize
		}
		return resp
	})
}

// Fetch (of __cluster_metadata-0): v12-16, on the controller listener. The
// quorum's leader serves brokers that are not voters (observers) the
// committed metadata entries from the fetch offset on, as stored in its
// Raft log (one batch per entry, base offset = index), waiting up to
// MaxWaitMillis for new ones; the high watermark is the commit index plus
// one. A fetch offset the log has compacted away is answered with the
// latest snapshot's id (KIP-630), which FetchSnapshot then reads. Voters
// that do not lead answer NOT_LEADER_OR_FOLLOWER with the leader.
func (b *Broker) handleMetadataFetch(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.FetchRequest)
	return wire.Response{Deferred: func() wire.Response {
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		resp.SessionID = 0
		for _, rt := range r.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.RecordBatches = []byte{}
				b.fetchMetadata(ctx, r, &rt, &rp, &sp)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return respond(resp)
	}}
}

func (b *Broker) fetchMetadata(ctx context.Context, r *kmsg.FetchRequest, rt *kmsg.FetchRequestTopic, rp *kmsg.FetchRequestTopicPartition, sp *kmsg.FetchResponseTopicPartition) {
	sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
	named := rt.Topic == quorum.MetadataTopic || r.Version >= 13 && rt.TopicID == quorum.MetadataTopicID
	node := b.raft.Load()
	if !named || rp.Partition != 0 || node == nil {
		sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
		return
	}
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond
	c, err := node.ReadCommitted(ctx, uint64(max(rp.FetchOffset, 1)), int(min(rp.PartitionMaxBytes, r.MaxBytes)), wait)
	if err != nil {
		sp.ErrorCode = errorCode(fmt.Errorf("%w: %v", kerr.UnknownServerError, err))
		return
	}
	if !c.Leader {
		sp.ErrorCode = kerr.NotLeaderForPartition.Code
		// The quorum's own view: the controller over it may not be open
		// yet when an observer fetches during start-up.
		if st, err := node.Status(ctx); err == nil && st.Leader >= 0 {
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = st.Leader, int32(st.Term)
		}
		return
	}
	sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = b.nodeID, int32(c.Term)
	sp.HighWatermark, sp.LastStableOffset = int64(c.Commit)+1, int64(c.Commit)+1
	if c.Snapshot != nil {
		sp.SnapshotID.EndOffset, sp.SnapshotID.Epoch = int64(c.Snapshot.Index)+1, int32(c.Snapshot.Term)
		return
	}
	sp.RecordBatches = c.Batches
}

// FetchSnapshot: v0-1, on the controller listener: a chunk of the quorum
// leader's latest snapshot of the metadata, for an observer whose fetch
// offset was compacted away.
func (b *Broker) handleFetchSnapshot(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.FetchSnapshotRequest)
	resp := r.ResponseKind().(*kmsg.FetchSnapshotResponse)
	node := b.raft.Load()
	for _, rt := range r.Topics {
		st := kmsg.NewFetchSnapshotResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchSnapshotResponseTopicPartition()
			sp.Partition = rp.Partition
			snap := quorum.Snapshot{}
			if node != nil {
				snap = node.Checkpoint()
			}
			switch {
			case rt.Topic != quorum.MetadataTopic || rp.Partition != 0 || node == nil:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case int64(snap.Index)+1 != rp.SnapshotID.EndOffset:
				sp.ErrorCode = kerr.SnapshotNotFound.Code
			case rp.Position < 0 || rp.Position > int64(len(snap.Data)):
				sp.ErrorCode = kerr.PositionOutOfRange.Code
			default:
				end := min(int64(len(snap.Data)), rp.Position+int64(max(r.MaxBytes, 1)))
				sp.SnapshotID.EndOffset, sp.SnapshotID.Epoch = rp.SnapshotID.EndOffset, int32(snap.Term)
				sp.Size, sp.Position, sp.Bytes = int64(len(snap.Data)), rp.Position, snap.Data[rp.Position:end]
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return respond(resp)
}
