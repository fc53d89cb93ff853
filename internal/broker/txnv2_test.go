package broker

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
	"github.com/strata-io/strata/internal/txn"
)

// rawTxn drives one transactional id with raw kmsg requests over real
// connections, one request per connection, at versions the test picks.
type rawTxn struct {
	t     *testing.T
	addr  string
	id    string
	topic string
	pid   int64
	epoch int16
}

// newRawTxn finds the coordinator (which creates __transaction_state)
// and initializes the transactional id.
func newRawTxn(t *testing.T, addr, id, topic string) *rawTxn {
	t.Helper()
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorType, fc.CoordinatorKeys = 4, 1, []string{id}
	poll.UntilStatus(t, 30*time.Second, "the transaction coordinator is found", func() (bool, string) {
		resp := rawRequest(t, addr, fc).(*kmsg.FindCoordinatorResponse)
		return resp.Coordinators[0].ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(resp.Coordinators[0].ErrorCode))
	})
	r := &rawTxn{t: t, addr: addr, id: id, topic: topic}
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version, init.TransactionalID, init.TransactionTimeoutMillis = 5, kmsg.StringPtr(id), 60_000
	poll.UntilStatus(t, 30*time.Second, "InitProducerId succeeds", func() (bool, string) {
		resp := rawRequest(t, addr, init).(*kmsg.InitProducerIDResponse)
		r.pid, r.epoch = resp.ProducerID, resp.ProducerEpoch
		return resp.ErrorCode == 0, fmt.Sprint(kerr.ErrorForCode(resp.ErrorCode))
	})
	return r
}

// add is a client's AddPartitionsToTxn v3 of partition 0 at epoch.
func (r *rawTxn) add(epoch int16) int16 {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch = 3, r.id, r.pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = r.topic, []int32{0}
	req.Topics = []kmsg.AddPartitionsToTxnRequestTopic{rt}
	resp := rawRequest(r.t, r.addr, req).(*kmsg.AddPartitionsToTxnResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// produce sends n transactional records to partition 0 at epoch and
// sequence seq, at Produce version.
func (r *rawTxn) produce(version int16, epoch int16, seq int32, n int) int16 {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, -1, 10_000
	req.TransactionID = kmsg.StringPtr(r.id)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = r.topic
	part := kmsg.NewProduceRequestTopicPartition()
	part.Records = txnBatch(n, r.pid, epoch, seq)
	rt.Partitions = append(rt.Partitions, part)
	req.Topics = append(req.Topics, rt)
	resp := rawRequest(r.t, r.addr, req).(*kmsg.ProduceResponse)
	return resp.Topics[0].Partitions[0].ErrorCode
}

// end sends EndTxn at version and epoch.
func (r *rawTxn) end(version int16, epoch int16, commit bool) *kmsg.EndTxnResponse {
	req := kmsg.NewPtrEndTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = version, r.id, r.pid, epoch, commit
	return rawRequest(r.t, r.addr, req).(*kmsg.EndTxnResponse)
}

// wantCode fails the test unless got is want's code (nil: no error).
func wantCode(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	var code int16
	if want != nil {
		code = want.Code
	}
	if got != code {
		t.Fatalf("%s: %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// TestEndTxnV5FencesTheLastTransaction is KIP-890 part 2 over raw
// requests: EndTxn v5 ends each transaction at a bumped epoch, which it
// answers and the markers carry. KAFKA-17754's late requests of the
// previous transaction, an EndTxn and a produce at its epoch, arriving
// while the next transaction is open, are fenced and change nothing: the
// next transaction commits exactly its own records. With Produce v11 the
// client adds the partition (AddPartitionsToTxn v3); with v12 the leader
// does.
func TestEndTxnV5FencesTheLastTransaction(t *testing.T) {
	tb := startBroker(t, txnSettings)
	for _, version := range []int16{11, 12} {
		t.Run(fmt.Sprintf("produce-v%d", version), func(t *testing.T) {
			topic := fmt.Sprintf("bump-%d", version)
			createTopic(t, newAdmin(t, tb.Addr()), topic, 1, nil)
			endTxnV5FencesTheLastTransaction(t, tb, newRawTxn(t, tb.Addr(), topic, topic), version)
		})
	}
}

func endTxnV5FencesTheLastTransaction(t *testing.T, tb *testBroker, r *rawTxn, version int16) {
	first := r.epoch
	add := func(epoch int16) {
		t.Helper()
		if version < 12 {
			wantCode(t, "AddPartitionsToTxn", r.add(epoch), nil)
		}
	}

	// The first transaction: two records, committed with v5.
	add(first)
	wantCode(t, "produce", r.produce(version, first, 0, 2), nil)
	resp := r.end(5, first, true)
	wantCode(t, "EndTxn v5", resp.ErrorCode, nil)
	if resp.ProducerID != r.pid || resp.ProducerEpoch != first+1 {
		t.Fatalf("EndTxn v5 answered producer %d epoch %d, want %d epoch %d", resp.ProducerID, resp.ProducerEpoch, r.pid, first+1)
	}
	// Its retry succeeds with the same answer; the opposite decision at
	// the ended epoch is refused.
	resp = r.end(5, first, true)
	wantCode(t, "retried EndTxn v5", resp.ErrorCode, nil)
	if resp.ProducerEpoch != first+1 {
		t.Fatalf("retried EndTxn v5 answered epoch %d, want %d", resp.ProducerEpoch, first+1)
	}
	wantCode(t, "abort at the committed epoch", r.end(5, first, false).ErrorCode, kerr.InvalidTxnState)
	rp, _ := tb.partition(r.topic, 0)
	poll.Until(t, 30*time.Second, "the commit marker is written", func() bool { return rp.LastStableOffset() == rp.HighWatermark() })
	markerEpoch := func() int16 {
		ps, err := rp.ActiveProducers()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.ProducerID == r.pid {
				return p.ProducerEpoch
			}
		}
		return -1
	}
	if e := markerEpoch(); e != first+1 {
		t.Fatalf("the partition has the producer at epoch %d after the marker, want %d", e, first+1)
	}

	// A late produce of the first transaction before the next one writes
	// here: the coordinator fences it, and no transaction opens.
	wantCode(t, "late produce, no transaction open", r.produce(version, first, 2, 1), kerr.InvalidProducerEpoch)
	if lso, hw := rp.LastStableOffset(), rp.HighWatermark(); lso != hw {
		t.Fatalf("last stable offset %d held back below the high watermark %d", lso, hw)
	}

	// The next transaction, at the new epoch, sequences from 0.
	next := first + 1
	add(next)
	wantCode(t, "produce", r.produce(version, next, 0, 3), nil)
	// The late EndTxn of the first transaction, either way, and a late
	// produce at its epoch into the open transaction: fenced.
	wantCode(t, "late EndTxn abort", r.end(5, first, false).ErrorCode, kerr.ProducerFenced)
	wantCode(t, "late EndTxn commit", r.end(5, first, true).ErrorCode, kerr.ProducerFenced)
	wantCode(t, "late EndTxn v1", r.end(1, first, false).ErrorCode, kerr.InvalidProducerEpoch)
	wantCode(t, "late produce into the open transaction", r.produce(version, first, 2, 1), kerr.InvalidProducerEpoch)
	if md, err := tb.txns.Describe(r.id); err != nil || md.State != txn.Ongoing || md.ProducerEpoch != next {
		t.Fatalf("after the late requests: %+v %v, want Ongoing at epoch %d", md, err, next)
	}

	resp = r.end(5, next, true)
	wantCode(t, "EndTxn v5", resp.ErrorCode, nil)
	if resp.ProducerEpoch != next+1 {
		t.Fatalf("EndTxn v5 answered epoch %d, want %d", resp.ProducerEpoch, next+1)
	}
	// Both transactions' records, and nothing else.
	poll.Until(t, 30*time.Second, "the commit marker is written", func() bool { return rp.LastStableOffset() == rp.HighWatermark() })
	consumeCommitted(t, tb.Addr(), 5, r.topic)
	if hw := rp.HighWatermark(); hw != 2+1+3+1 {
		t.Fatalf("high watermark %d, want 7 (5 records, 2 markers)", hw)
	}

	// An abort with nothing in the transaction bumps the epoch with v5; a
	// commit of nothing is refused.
	wantCode(t, "empty commit", r.end(5, next+1, true).ErrorCode, kerr.InvalidTxnState)
	resp = r.end(5, next+1, false)
	wantCode(t, "empty abort", resp.ErrorCode, nil)
	if resp.ProducerEpoch != next+2 {
		t.Fatalf("empty abort answered epoch %d, want %d", resp.ProducerEpoch, next+2)
	}
}

// requestKeys is a kgo hook that counts the requests a client sends, by
// API key.
type requestKeys struct {
	mu    sync.Mutex
	count map[int16]int
}

func newRequestKeys() *requestKeys { return &requestKeys{count: map[int16]int{}} }

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (k *requestKeys) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.count[key]++
}

func (k *requestKeys) sent(key kmsg.Key) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.count[key.Int16()]
}

// TestKgoUsesTransactionsV2: with transaction.version 2 finalized, which
// a new cluster does, franz-go's transactional producer runs KIP-890 part
// 2: it sends no AddPartitionsToTxn or AddOffsetsToTxn (the leaders add
// the partitions, Produce v12 and TxnOffsetCommit v5), and every
// transaction ends at a new epoch.
func TestKgoUsesTransactionsV2(t *testing.T) {
	tb := startBroker(t, txnSettings)
	adm := newAdmin(t, tb.Addr())
	createTopic(t, adm, "tv2", 2, nil)

	vreq := kmsg.NewPtrApiVersionsRequest()
	vreq.Version = 3
	vresp := rawRequest(t, tb.Addr(), vreq).(*kmsg.ApiVersionsResponse)
	finalized := map[string]int16{}
	for _, f := range vresp.FinalizedFeatures {
		finalized[f.Name] = f.MaxVersionLevel
	}
	if vresp.FinalizedFeaturesEpoch < 0 || finalized["transaction.version"] != 2 {
		t.Fatalf("ApiVersions finalized features %v at epoch %d, want transaction.version 2", finalized, vresp.FinalizedFeaturesEpoch)
	}

	keys := newRequestKeys()
	cl := newClient(t, tb.Addr(), kgo.TransactionalID("tv2"), kgo.DefaultProduceTopic("tv2"), kgo.WithHooks(keys))
	produceTxn(t, cl, "tv2", "committed", 10, true)
	first, err := tb.txns.Describe("tv2")
	if err != nil {
		t.Fatal(err)
	}
	produceTxn(t, cl, "tv2", "aborted", 5, false)
	produceTxn(t, cl, "tv2", "committed-again", 3, true)
	var md txn.Metadata
	poll.UntilStatus(t, 30*time.Second, "the last transaction completes", func() (bool, string) {
		md, err = tb.txns.Describe("tv2")
		return err == nil && md.State == txn.CompleteCommit, fmt.Sprintf("%+v %v", md, err)
	})
	if md.ProducerEpoch != first.ProducerEpoch+2 || md.ClientTransactionVersion != 2 {
		t.Fatalf("after three transactions: epoch %d (after the first %d), transactions version %d; want two bumps more, version 2",
			md.ProducerEpoch, first.ProducerEpoch, md.ClientTransactionVersion)
	}
	if n := keys.sent(kmsg.AddPartitionsToTxn); n != 0 {
		t.Fatalf("the client sent %d AddPartitionsToTxn", n)
	}
	if n := keys.sent(kmsg.EndTxn); n != 3 {
		t.Fatalf("the client sent %d EndTxn, want 3", n)
	}
	committed := consumeCommitted(t, tb.Addr(), 13, "tv2")
	for _, r := range committed {
		if strings.HasPrefix(string(r.Value), "aborted") {
			t.Fatalf("read_committed consumer read %q", r.Value)
		}
	}
}

// TestTxnOffsetCommitV5AddsTheOffsets: with TxnOffsetCommit v5 the broker
// adds the group's __consumer_offsets partition to the transaction (no
// AddOffsetsToTxn), the offsets become visible at the commit, and a late
// TxnOffsetCommit of the committed transaction's epoch is fenced without
// opening a transaction or moving the offsets.
func TestTxnOffsetCommitV5AddsTheOffsets(t *testing.T) {
	tb := startBroker(t, txnSettings)
	createTopic(t, newAdmin(t, tb.Addr()), "offs-in", 1, nil)
	r := newRawTxn(t, tb.Addr(), "offs", "offs-in")
	commit := func(epoch int16, offset int64) int16 {
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Version, req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = 5, r.id, "g5", r.pid, epoch
		req.Generation, req.MemberID = -1, ""
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "offs-in"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = []kmsg.TxnOffsetCommitRequestTopicPartition{rp}
		req.Topics = []kmsg.TxnOffsetCommitRequestTopic{rt}
		return rawRequest(t, tb.Addr(), req).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	committed := func() int64 {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Version, req.Group, req.RequireStable = 7, "g5", true
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "offs-in", []int32{0}
		req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
		resp := rawRequest(t, tb.Addr(), req).(*kmsg.OffsetFetchResponse)
		if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("OffsetFetch: %v %v", kerr.ErrorForCode(resp.ErrorCode), kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode))
		}
		return resp.Topics[0].Partitions[0].Offset
	}

	poll.UntilStatus(t, 30*time.Second, "TxnOffsetCommit v5", func() (bool, string) {
		code := commit(r.epoch, 42)
		return code == 0, fmt.Sprint(kerr.ErrorForCode(code))
	})
	md, err := tb.txns.Describe(r.id)
	if err != nil || md.State != txn.Ongoing || len(md.Partitions) != 1 || md.Partitions[0].Topic != OffsetsTopic || md.ClientTransactionVersion != 2 {
		t.Fatalf("after TxnOffsetCommit v5: %+v %v, want Ongoing with the group's offsets partition, version 2", md, err)
	}
	resp := r.end(5, r.epoch, true)
	wantCode(t, "EndTxn v5", resp.ErrorCode, nil)
	if got := committed(); got != 42 {
		t.Fatalf("committed offset %d, want 42", got)
	}
	wantCode(t, "late TxnOffsetCommit", commit(r.epoch, 99), kerr.ProducerFenced)
	if got := committed(); got != 42 {
		t.Fatalf("committed offset %d after the late commit, want 42", got)
	}
	if md, err := tb.txns.Describe(r.id); err != nil || md.State != txn.CompleteCommit {
		t.Fatalf("after the late commit: %+v %v, want CompleteCommit", md, err)
	}
}

// finalizedTV is the transaction.version a broker's ApiVersions finalizes
// (0 when none).
func finalizedTV(t *testing.T, addr string) int16 {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	for _, f := range rawRequest(t, addr, req).(*kmsg.ApiVersionsResponse).FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel
		}
	}
	return 0
}

// TestUpdateFeaturesMovesTransactionVersion: UpdateFeatures lowers
// transaction.version (only when asked to downgrade) and raises it again;
// clients follow: franz-go adds partitions itself at version 0 and leaves
// it to the leaders at version 2.
func TestUpdateFeaturesMovesTransactionVersion(t *testing.T) {
	tb := startBroker(t, txnSettings)
	createTopic(t, newAdmin(t, tb.Addr()), "tvs", 1, nil)
	update := func(level int16, upgradeType int8, validateOnly bool, feature string) int16 {
		req := kmsg.NewPtrUpdateFeaturesRequest()
		req.Version, req.TimeoutMillis, req.ValidateOnly = 1, 30_000, validateOnly
		u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
		u.Feature, u.MaxVersionLevel, u.UpgradeType = feature, level, upgradeType
		req.FeatureUpdates = []kmsg.UpdateFeaturesRequestFeatureUpdate{u}
		resp := rawRequest(t, tb.Addr(), req).(*kmsg.UpdateFeaturesResponse)
		if resp.ErrorCode != 0 {
			// A failed update fails the request, as in Kafka.
			if len(resp.Results) != 0 {
				t.Fatalf("UpdateFeatures failed with %v and %d results, want none", kerr.ErrorForCode(resp.ErrorCode), len(resp.Results))
			}
			return resp.ErrorCode
		}
		if len(resp.Results) != 1 {
			t.Fatalf("UpdateFeatures: %d results, want 1", len(resp.Results))
		}
		return resp.Results[0].ErrorCode
	}
	const tv = "transaction.version"
	if got := finalizedTV(t, tb.Addr()); got != 2 {
		t.Fatalf("a new cluster finalizes transaction.version %d, want 2", got)
	}
	wantCode(t, "lowering without a downgrade", update(0, 1, false, tv), kerr.InvalidUpdateVersion)
	wantCode(t, "an unsupported level", update(3, 1, false, tv), kerr.InvalidUpdateVersion)
	wantCode(t, "an unknown feature", update(1, 1, false, "no.such.version"), kerr.InvalidUpdateVersion)
	wantCode(t, "a downgrade", update(0, 2, false, tv), nil)
	if got := finalizedTV(t, tb.Addr()); got != 0 {
		t.Fatalf("after the downgrade transaction.version %d, want 0", got)
	}

	txns := func(id string) *requestKeys {
		keys := newRequestKeys()
		cl := newClient(t, tb.Addr(), kgo.TransactionalID(id), kgo.DefaultProduceTopic("tvs"), kgo.WithHooks(keys))
		produceTxn(t, cl, "tvs", id, 2, true)
		produceTxn(t, cl, "tvs", id, 2, true)
		return keys
	}
	if keys := txns("tv0"); keys.sent(kmsg.AddPartitionsToTxn) != 2 {
		t.Fatalf("at transaction.version 0 the client sent %d AddPartitionsToTxn, want 2", keys.sent(kmsg.AddPartitionsToTxn))
	}
	if md, err := tb.txns.Describe("tv0"); err != nil || md.ProducerEpoch != 0 {
		t.Fatalf("at transaction.version 0: %+v %v, want epoch 0 after two transactions", md, err)
	}

	wantCode(t, "validating the upgrade", update(2, 1, true, tv), nil)
	if got := finalizedTV(t, tb.Addr()); got != 0 {
		t.Fatalf("after ValidateOnly transaction.version %d, want 0", got)
	}
	wantCode(t, "the upgrade", update(2, 1, false, tv), nil)
	if got := finalizedTV(t, tb.Addr()); got != 2 {
		t.Fatalf("after the upgrade transaction.version %d, want 2", got)
	}
	if keys := txns("tv2"); keys.sent(kmsg.AddPartitionsToTxn) != 0 {
		t.Fatalf("at transaction.version 2 the client sent %d AddPartitionsToTxn", keys.sent(kmsg.AddPartitionsToTxn))
	}
	if md, err := tb.txns.Describe("tv2"); err != nil || md.ProducerEpoch != 2 {
		t.Fatalf("at transaction.version 2: %+v %v, want epoch 2 after two transactions", md, err)
	}
}
