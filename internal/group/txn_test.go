package group

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

func txnCommitReq(version int16, group string, pid int64, gen int32, member string, offsets map[string]map[int32]int64) *kmsg.TxnOffsetCommitRequest {
	r := kmsg.NewPtrTxnOffsetCommitRequest()
	r.Version = version
	r.TransactionalID, r.Group, r.ProducerID, r.ProducerEpoch = "tx", group, pid, 0
	r.Generation, r.MemberID = gen, member
	for _, topic := range sortedKeys(offsets) {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, o := range offsets[topic] {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, o
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	return r
}

func (h *harness) fetchStable(group, topic string, p int32) (int64, int16) {
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version, r.RequireStable = 8, true
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	g.Topics = []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: []int32{p}}}
	r.Groups = []kmsg.OffsetFetchRequestGroup{g}
	fp := h.c.OffsetFetch(r).Groups[0].Topics[0].Partitions[0]
	return fp.Offset, fp.ErrorCode
}

func TestTxnOffsetCommitPendsUntilTheMarker(t *testing.T) {
	h := newHarness(t, nil, topic("t", 2))
	resp := h.c.TxnOffsetCommit(context.Background(), txnCommitReq(3, "g", 7, -1, "", map[string]map[int32]int64{"t": {0: 10, 1: 20}}))
	for _, p := range resp.Topics[0].Partitions {
		if p.ErrorCode != 0 {
			t.Fatalf("TxnOffsetCommit: %v", kerr.ErrorForCode(p.ErrorCode))
		}
	}
	// Pending: invisible, and unstable to those who ask for stable offsets.
	if got, _ := h.fetch("g", map[string][]int32{"t": {0}}); got["t/0"] != -1 {
		t.Fatalf("pending offset visible: %v", got)
	}
	if _, code := h.fetchStable("g", "t", 0); code != kerr.UnstableOffsetCommit.Code {
		t.Fatalf("require stable: %v, want UNSTABLE_OFFSET_COMMIT", kerr.ErrorForCode(code))
	}
	// The batch in __consumer_offsets is the producer's, transactional.
	mp := h.partitionOf("g")
	var txnBatches int
	_ = mp.ReadBatches(0, func(b []byte) bool {
		if hd, _ := record.ParseHeader(b); hd.IsTransactional() && hd.ProducerID == 7 {
			txnBatches++
		}
		return true
	})
	if txnBatches != 1 {
		t.Fatalf("%d transactional batches of producer 7", txnBatches)
	}

	// An abort drops them; a commit of the next transaction shows them.
	part := h.c.HashPartition("g")
	if err := mp.Append(context.Background(), record.BuildMarker(nil, 7, 0, false, 1, 0)); err != nil {
		t.Fatal(err)
	}
	h.c.CompleteTransaction(part, 7, false)
	if _, code := h.fetchStable("g", "t", 0); code != 0 {
		t.Fatalf("after the abort: %v", kerr.ErrorForCode(code))
	}
	h.c.TxnOffsetCommit(context.Background(), txnCommitReq(3, "g", 7, -1, "", map[string]map[int32]int64{"t": {0: 11}}))
	if err := mp.Append(context.Background(), record.BuildMarker(nil, 7, 0, true, 1, 0)); err != nil {
		t.Fatal(err)
	}
	h.c.CompleteTransaction(part, 7, true)
	if got, code := h.fetchStable("g", "t", 0); code != 0 || got != 11 {
		t.Fatalf("after the commit: %d %v", got, kerr.ErrorForCode(code))
	}

	// A reload replays the same from the log: 10 and 20 aborted, 11
	// committed.
	h.c.Unload(part)
	h.load(part, mp)
	if got, code := h.fetchStable("g", "t", 0); code != 0 || got != 11 {
		t.Fatalf("after reload: %d %v", got, kerr.ErrorForCode(code))
	}
	if got, code := h.fetchStable("g", "t", 1); code != 0 || got != -1 {
		t.Fatalf("after reload, the aborted offset: %d %v", got, kerr.ErrorForCode(code))
	}

	// KIP-447: a member of a group must give its generation.
	h2 := newHarness(t, nil, topic("t", 1))
	_, ch := h2.joinNew("cg", "range")
	h2.clock.Advance(3 * time.Second) // group.initial.rebalance.delay.ms
	join := recv(t, ch)
	bad := h2.c.TxnOffsetCommit(context.Background(), txnCommitReq(3, "cg", 8, join.Generation+1, join.MemberID, map[string]map[int32]int64{"t": {0: 1}}))
	if code := bad.Topics[0].Partitions[0].ErrorCode; code != kerr.IllegalGeneration.Code && code != kerr.RebalanceInProgress.Code {
		t.Fatalf("wrong generation: %v", kerr.ErrorForCode(code))
	}
	unknown := h2.c.TxnOffsetCommit(context.Background(), txnCommitReq(3, "cg", 8, join.Generation, "someone-else", map[string]map[int32]int64{"t": {0: 1}}))
	if code := unknown.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member: %v", kerr.ErrorForCode(code))
	}
}
