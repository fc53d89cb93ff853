package strata_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/testutil/poll"
)

// rawRequest sends req at its set version to addr on a new connection and
// decodes the response.
func rawRequest(t *testing.T, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	var rh kmsg.RequestFormatter
	if _, err := conn.Write(rh.AppendRequest(nil, req, 1)); err != nil {
		t.Fatal(err)
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatalf("reading the response to %T: %v", req, err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, buf); err != nil {
		t.Fatal(err)
	}
	body := buf[4:] // the correlation id
	resp := req.ResponseKind()
	if resp.IsFlexible() {
		body = body[1:] // the response header's empty tagged fields
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestVerificationGuardAcrossBrokers is the window between a transactional
// batch's verification and its append, on two nodes over real sockets:
// the partition's leader asks the transaction coordinator, on the other
// node, whether the partition is in the transaction (KIP-890 part 1); the
// coordinator says yes; before the answer reaches the leader, the client
// aborts the transaction and the coordinator's marker lands on the
// partition, where no transaction is open yet. The answer then arrives.
// Appending the batch now would open a transaction that no marker will
// ever end, holding the last stable offset back for good; the leader's
// verification guard, which the marker cleared, refuses it. The cluster's
// network holds the coordinator's answer back (Cluster.HoldResponse), so
// the order is fixed, not timed.
func TestVerificationGuardAcrossBrokers(t *testing.T) {
	c, err := strata.StartCluster(strata.ClusterOptions{Nodes: 2, Dir: t.TempDir(), Settings: map[string]string{
		"transaction.state.log.num.partitions":     "1",
		"transaction.state.log.replication.factor": "1",
		"default.replication.factor":               "1",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id, topic = "guarded", "guarded"

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, 1, []string{id}
	var coordinator int32
	poll.UntilStatus(t, time.Minute, "the transaction coordinator is found", func() (bool, string) {
		resp := rawRequest(t, c.Addr(1), fc).(*kmsg.FindCoordinatorResponse)
		coordinator = resp.Coordinators[0].NodeID
		return resp.Coordinators[0].ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(resp.Coordinators[0].ErrorCode))
	})
	leader := 3 - coordinator

	// The topic's one partition on the other node.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.Version, ct.TimeoutMillis = 5, 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, []int32{leader}
	rt.ReplicaAssignment = []kmsg.CreateTopicsRequestTopicReplicaAssignment{ra}
	ct.Topics = []kmsg.CreateTopicsRequestTopic{rt}
	if code := rawRequest(t, c.Addr(leader), ct).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("creating the topic: %v", kerr.ErrorForCode(code))
	}
	poll.UntilStatus(t, time.Minute, "the partition is led by the other node", func() (bool, string) {
		l, err := c.Leader(ctx, topic, 0)
		return l == leader, fmt.Sprint(l, err)
	})

	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 4, kmsg.StringPtr(id), 60_000
	var pid int64
	var epoch int16
	poll.UntilStatus(t, time.Minute, "InitProducerId", func() (bool, string) {
		resp := rawRequest(t, c.Addr(coordinator), init).(*kmsg.InitProducerIDResponse)
		pid, epoch = resp.ProducerID, resp.ProducerEpoch
		return resp.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(resp.ErrorCode))
	})
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version, add.TransactionalID, add.ProducerID, add.ProducerEpoch = 3, id, pid, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = topic, []int32{0}
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{at}
	if code := rawRequest(t, c.Addr(coordinator), add).(*kmsg.AddPartitionsToTxnResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("AddPartitionsToTxn: %v", kerr.ErrorForCode(code))
	}

	// The first transactional batch, to the leader, which verifies it
	// with the coordinator; the coordinator's answer is held.
	held, err := c.HoldResponse(leader, coordinator, kmsg.AddPartitionsToTxn.Int16())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	produced := make(chan int16, 1)
	go func() {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 11, -1, 30_000
		req.TransactionID = kmsg.StringPtr(id)
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = topic
		part := kmsg.NewProduceRequestTopicPartition()
		part.Records = transactionalBatch(pid, epoch)
		pt.Partitions = []kmsg.ProduceRequestTopicPartition{part}
		req.Topics = []kmsg.ProduceRequestTopic{pt}
		produced <- rawRequest(t, c.Addr(leader), req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}()
	select {
	case <-held.Arrived():
	case <-ctx.Done():
		t.Fatal("the coordinator never answered the leader's verification")
	}

	// Meanwhile the client aborts; EndTxn is answered once the markers
	// are written, the leader's included.
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = 3, id, pid, epoch, false
	if code := rawRequest(t, c.Addr(coordinator), end).(*kmsg.EndTxnResponse).ErrorCode; code != 0 {
		t.Fatalf("EndTxn: %v", kerr.ErrorForCode(code))
	}
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{id}
	poll.UntilStatus(t, time.Minute, "the abort is complete", func() (bool, string) {
		st := rawRequest(t, c.Addr(coordinator), dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]
		return st.State == "CompleteAbort", st.State
	})

	// The verification's "yes" reaches the leader now.
	held.Release()
	var code int16
	select {
	case code = <-produced:
	case <-ctx.Done():
		t.Fatal("no answer to the produce")
	}
	if code != kerr.InvalidTxnState.Code {
		t.Fatalf("the batch verified before the marker and appended after it: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	// Nothing holds the last stable offset back.
	latest := func(isolation int8) int64 {
		lo := kmsg.NewPtrListOffsetsRequest()
		lo.Version, lo.ReplicaID, lo.IsolationLevel = 4, -1, isolation
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = topic
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = 0, -1, -1
		lt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{lp}
		lo.Topics = []kmsg.ListOffsetsRequestTopic{lt}
		return rawRequest(t, c.Addr(leader), lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].Offset
	}
	if stable, end := latest(1), latest(0); stable != end {
		t.Fatalf("last stable offset %d below the high watermark %d: a transaction was left open", stable, end)
	}
}

// transactionalBatch is one transactional record of producer pid at
// epoch, sequence 0.
func transactionalBatch(pid int64, epoch int16) []byte {
	b := record.Build(nil, []record.Rec{{Value: []byte("late"), Timestamp: time.Now().UnixMilli()}})
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], 0)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|record.AttrTransactional)
	binary.BigEndian.PutUint32(b[17:], record.Checksum(b))
	return b
}
