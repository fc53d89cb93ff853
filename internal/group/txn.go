package group

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/record"
)

// Transactional offset commits (KIP-98, KIP-447). TxnOffsetCommit writes
// its offsets to __consumer_offsets in a transactional batch of the
// producer; they stay pending, invisible to OffsetFetch (which answers
// UNSTABLE_OFFSET_COMMIT for them when it asks for stable offsets), until
// the transaction coordinator's marker reaches the partition: then
// CompleteTransaction commits them or drops them. A load replays the
// same: transactional batches pend until the marker that follows them.

// txnProducer names the producer a write's batch belongs to; nil for the
// coordinator's own writes.
type txnProducer struct {
	id    int64
	epoch int16
}

// pendingTxn is one producer's pending offsets in a shard.
type pendingTxn struct {
	offsets map[string]map[topicPartition]offsetAndMetadata
}

func (st *data) pending(producerID int64, create bool) *pendingTxn {
	p := st.pendingTxns[producerID]
	if p == nil && create {
		p = &pendingTxn{offsets: map[string]map[topicPartition]offsetAndMetadata{}}
		st.pendingTxns[producerID] = p
	}
	return p
}

// addPending records an offset of producerID's open transaction.
func (st *data) addPending(producerID int64, groupID string, tp topicPartition, o offsetAndMetadata) {
	p := st.pending(producerID, true)
	g := p.offsets[groupID]
	if g == nil {
		g = map[topicPartition]offsetAndMetadata{}
		p.offsets[groupID] = g
	}
	g[tp] = o
}

// hasPending reports whether a transaction holds an offset of the group's
// partition that is not yet decided.
func (st *data) hasPending(groupID string, tp topicPartition) bool {
	for _, p := range st.pendingTxns {
		if _, ok := p.offsets[groupID][tp]; ok {
			return true
		}
	}
	return false
}

// completeTxn commits or drops producerID's pending offsets.
func (st *data) completeTxn(producerID int64, commit bool, now time.Time) {
	p := st.pendingTxns[producerID]
	if p == nil {
		return
	}
	delete(st.pendingTxns, producerID)
	if !commit {
		return
	}
	for groupID, g := range p.offsets {
		for tp, o := range g {
			st.replayOffset(groupID, tp.topic, tp.partition, o, now)
		}
	}
}

// replayTxnBatch applies a transactional or control batch on load.
func (st *data) replayTxnBatch(h record.Header, batch []byte, now time.Time) error {
	if h.IsControl() {
		m, err := record.ParseMarker(batch)
		if err != nil {
			return nil // not a marker: ends nothing
		}
		st.completeTxn(h.ProducerID, m.Commit, now)
		return nil
	}
	return decodeRecords(batch, h, func(key, value []byte) error {
		groupID, topic, partition, o, ok, err := decodeOffsetRecord(key, value)
		if err != nil || !ok {
			return err
		}
		st.addPending(h.ProducerID, groupID, topicPartition{topic, partition}, o)
		return nil
	})
}

// CompleteTransaction is called once a transaction marker is committed in
// __consumer_offsets partition: the pending offsets of producerID in it
// become committed (commit) or are dropped. A partition not loaded here
// ignores it: its load replays the marker.
func (c *Coordinator) CompleteTransaction(partition int32, producerID int64, commit bool) {
	sh, err := c.rt.Acquire(partition)
	if err != nil {
		return
	}
	defer sh.Release()
	s := sh.Machine()
	s.completeTxn(producerID, commit, s.now)
}

// TxnOffsetCommit handles TxnOffsetCommit v0-4: the group's generation and
// member are checked as an OffsetCommit's are (KIP-447, v3+), and the
// offsets written in producerID's transaction, pending until its marker.
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	build := func() (*kmsg.TxnOffsetCommitResponse, []txnCommitEntry) { return c.txnOffsetCommitEntries(req) }
	return commitOffsets(ctx, c, req.Group, build, func(s *state, resp *kmsg.TxnOffsetCommitResponse, entries []txnCommitEntry, reply chan *kmsg.TxnOffsetCommitResponse) result {
		return s.txnOffsetCommit(req, resp, entries, reply)
	})
}

// txnOffsetCommitEntries is a TxnOffsetCommit's response with every
// partition that fails the topic checks answered, and the entries for the
// rest.
func (c *Coordinator) txnOffsetCommitEntries(req *kmsg.TxnOffsetCommitRequest) (*kmsg.TxnOffsetCommitResponse, []txnCommitEntry) {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	var entries []txnCommitEntry
	for _, rt := range req.Topics {
		t := kmsg.NewTxnOffsetCommitResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.TxnOffsetCommitResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, t)
	}
	for i, rt := range req.Topics {
		for j, rp := range rt.Partitions {
			out := &resp.Topics[i].Partitions[j]
			out.Partition = rp.Partition
			name, code := c.partitionCheck(rt.Topic, [16]byte{}, false, rp.Partition)
			if code != 0 {
				out.ErrorCode = code
				continue
			}
			entries = append(entries, txnCommitEntry{topic: name, partition: rp, code: &out.ErrorCode})
		}
	}
	return resp, entries
}

type txnCommitEntry struct {
	topic     string
	partition kmsg.TxnOffsetCommitRequestTopicPartition
	code      *int16
}

func (e txnCommitEntry) errCode() *int16 { return e.code }

// txnOffsetCommit is Kafka's OffsetMetadataManager.commitTransactionalOffset.
func (s *state) txnOffsetCommit(req *kmsg.TxnOffsetCommitRequest, resp *kmsg.TxnOffsetCommitResponse, entries []txnCommitEntry, reply chan *kmsg.TxnOffsetCommitResponse) result {
	fail := func(code int16) result {
		for _, e := range entries {
			*e.code = code
		}
		deliver(reply, resp)
		return result{}
	}
	if req.ProducerID < 0 {
		return fail(kerr.InvalidProducerIDMapping.Code)
	}
	// The generation and member, as an OffsetCommit at the version that
	// knows them; a commit without them (v0-2, or -1 and "") is not checked,
	// as in Kafka, but needs the group to be empty or not to exist.
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version = 9
	oc.Group, oc.Generation, oc.MemberID, oc.InstanceID = req.Group, req.Generation, req.MemberID, req.InstanceID
	if req.Version < 3 {
		oc.Generation, oc.MemberID, oc.InstanceID = -1, "", nil
	}
	if req.Generation >= 0 || req.MemberID != "" || s.groups[req.Group] == nil {
		if _, code := s.validateOffsetCommit(oc); code != 0 {
			if code == kerr.StaleMemberEpoch.Code || code == kerr.GroupIDNotFound.Code {
				code = kerr.IllegalGeneration.Code
			}
			return fail(code)
		}
	}
	now := s.now.UnixMilli()
	type commit struct {
		tp topicPartition
		o  offsetAndMetadata
	}
	var (
		records []kv
		commits []commit
	)
	for _, e := range entries {
		p := e.partition
		if p.Metadata != nil && javaLength(*p.Metadata) > int(s.cfg.OffsetMetadataMaxBytes) {
			*e.code = kerr.OffsetMetadataTooLarge.Code
			continue
		}
		o := offsetAndMetadata{offset: p.Offset, leaderEpoch: p.LeaderEpoch, commitTimestamp: now, expireTimestamp: -1}
		if p.Metadata != nil {
			o.metadata = *p.Metadata
		}
		if req.Version < 2 {
			o.leaderEpoch = -1
		}
		records = append(records, offsetRecord(req.Group, e.topic, p.Partition, o))
		commits = append(commits, commit{topicPartition{e.topic, p.Partition}, o})
	}
	if len(records) == 0 {
		deliver(reply, resp)
		return result{}
	}
	groupID, producerID := req.Group, req.ProducerID
	return result{records: records, txn: &txnProducer{id: req.ProducerID, epoch: req.ProducerEpoch}, done: func(err error) {
		if err == nil {
			for _, c := range commits {
				s.addPending(producerID, groupID, c.tp, c.o)
			}
		} else {
			code := errCode(err)
			for _, e := range entries {
				*e.code = code
			}
		}
		deliver(reply, resp)
	}}
}
