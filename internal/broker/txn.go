package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/txn"
	"github.com/strata-io/strata/internal/wire"
)

// Transaction coordinator APIs. The coordinator (internal/txn) implements
// the protocol; these handlers route requests to it and wait for its writes
// to __transaction_state as deferred responses.
//
// AddPartitionsToTxn: v0-5 (v4+, from brokers, batches transactions and
// has VerifyOnly, KIP-890 part 1; without VerifyOnly it is transactions
// version 2's implicit add of a Produce v12+ or TxnOffsetCommit v5+). AddOffsetsToTxn: v0-3. EndTxn: v0-5 (v5 is
// transactions version 2, KIP-890 part 2: the coordinator bumps the
// producer epoch at every transaction end and answers the producer id and
// epoch to go on with; v4 only adds TRANSACTION_ABORTABLE, which the
// coordinator does not answer EndTxn). WriteTxnMarkers: v0-1, from
// coordinators to partition leaders.
//
// Behavior:
// * PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to versions that
// predate it (KIP-588), as Kafka does.
func init() {
	register(api{key: kmsg.AddPartitionsToTxn, min: 0, max: 5, handle: (*Broker).handleAddPartitionsToTxn,
		authorize: authorizeAddPartitionsToTxn, errors: addPartitionsToTxnErrors,
		quota: &quotaRule{exempt: func(req kmsg.Request) exemption {
			if req.GetVersion() >= 4 {
				return interBroker // the brokers' batched form
			}
			return counted
		}}})
	register(api{key: kmsg.AddOffsetsToTxn, min: 0, max: 3, handle: (*Broker).handleAddOffsetsToTxn, quota: requestTime,
		authorize: authorizeAddOffsetsToTxn,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.AddOffsetsToTxnResponse).ErrorCode = code
		}})
	register(api{key: kmsg.EndTxn, min: 0, max: 5, handle: (*Broker).handleEndTxn, quota: requestTime,
		authorize: authorizeEndTxn,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.EndTxnResponse)
			out.ErrorCode, out.ProducerID, out.ProducerEpoch = code, -1, -1
		}})
	register(api{key: kmsg.WriteTxnMarkers, min: 0, max: 1, handle: (*Broker).handleWriteTxnMarkers,
		authorize: clusterRule(auth.OpClusterAction), errors: writeTxnMarkersErrors,
		quota: &quotaRule{exempt: func(kmsg.Request) exemption { return interBroker }}})
	register(api{key: kmsg.TxnOffsetCommit, min: 0, max: 5, handle: (*Broker).handleTxnOffsetCommit, quota: requestTime,
		authorize: authorizeTxnOffsetCommit,
		errors: func(req kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.TxnOffsetCommitResponse)
			out.Topics = append(out.Topics, txnOffsetCommitErrors(req.(*kmsg.TxnOffsetCommitRequest).Topics, code)...)
		}})
}

// handleTxnOffsetCommit: v0-5 (v3+ carries the group's generation and
// member, KIP-447; v5 is transactions version 2: the group's
// __consumer_offsets partition is added to the transaction here, the
// client sending no AddOffsetsToTxn). The group coordinator writes the
// offsets in the producer's transaction; they become visible at its
// COMMIT marker.
func (b *Broker) handleTxnOffsetCommit(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.TxnOffsetCommitRequest)
	return deferred(func() kmsg.Response {
		if r.Version >= 5 {
			if err := b.addOffsetsImplicitly(ctx, r); err != nil {
				b.logger.Debug("TxnOffsetCommit: adding the offsets to the transaction", "transactional.id", r.TransactionalID, "err", err)
				return txnOffsetCommitFailed(r, err)
			}
		}
		resp := b.groups.TxnOffsetCommit(ctx, r)
		if r.Version < 3 {
			for i := range resp.Topics {
				for j := range resp.Topics[i].Partitions {
					if p := &resp.Topics[i].Partitions[j]; p.ErrorCode == kerr.ProducerFenced.Code {
						p.ErrorCode = kerr.InvalidProducerEpoch.Code
					}
				}
			}
		}
		return resp
	})
}

// addOffsetsImplicitly adds the group's __consumer_offsets partition to
// the producer's transaction (TxnOffsetCommit v5+): transactions version
// 2's AddOffsetsToTxn, done by the broker.
func (b *Broker) addOffsetsImplicitly(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) error {
	if err := b.ensureOffsetsTopic(); err != nil {
		return fmt.Errorf("%w: creating __consumer_offsets: %v", kerr.CoordinatorNotAvailable, err)
	}
	v := &txnVerification{producerID: r.ProducerID, epoch: r.ProducerEpoch,
		partitions: []txn.TopicPartition{{Topic: OffsetsTopic, Partition: b.groups.HashPartition(r.Group)}}}
	actx, cancel := context.WithTimeout(ctx, txnVerifyTimeout)
	defer cancel()
	_, err := b.txnPartitions(actx, r.TransactionalID, v, true)
	return err
}

// txnOffsetCommitFailed answers every partition of r with err's code:
// what passes (the coordinator moving or loading, the previous
// transaction still completing) as COORDINATOR_LOAD_IN_PROGRESS, which
// clients retry.
func txnOffsetCommitFailed(r *kmsg.TxnOffsetCommitRequest, err error) *kmsg.TxnOffsetCommitResponse {
	code := errorCode(err)
	switch code {
	case kerr.ConcurrentTransactions.Code, kerr.CoordinatorNotAvailable.Code, kerr.NotCoordinator.Code:
		code = kerr.CoordinatorLoadInProgress.Code
	}
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// txnConfig converts the server configuration.
func txnConfig(cfg *config.Server) txn.Config {
	c := txn.DefaultConfig()
	c.NumPartitions = int32(cfg.Int("transaction.state.log.num.partitions"))
	c.MaxTimeoutMs = int32(cfg.Int("transaction.max.timeout.ms"))
	c.IDExpirationMs = cfg.Int("transactional.id.expiration.ms")
	c.AbortTimedOutIntervalMs = cfg.Int("transaction.abort.timed.out.transaction.cleanup.interval.ms")
	c.RemoveExpiredIntervalMs = cfg.Int("transaction.remove.expired.transaction.cleanup.interval.ms")
	return c
}

// newTxnCoordinator makes the broker's transaction coordinator.
func (b *Broker) newTxnCoordinator(cfg txn.Config) *txn.Coordinator {
	b.txnMarkers = &markerWriter{b: b, clients: map[int32]*interBrokerClient{}}
	return txn.NewCoordinator(cfg, txn.Deps{
		Logger: b.logger.With("component", "txn"),
		Now:    b.now,
		NewProducerID: func() (int64, error) {
			id, _, err := b.producerIDs.InitIdempotent()
			return id, err
		},
		Markers: b.txnMarkers,
	})
}

// fencedCode answers PRODUCER_FENCED as INVALID_PRODUCER_EPOCH to request
// versions before fenced: the error did not exist for them (KIP-588).
func fencedCode(err error, version, fenced int16) int16 {
	code := errorCode(err)
	if code == kerr.ProducerFenced.Code && version < fenced {
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}

// ensureTxnStateTopic creates __transaction_state on first use, compacted,
// with replication factor min(transaction.state.log.replication.factor,
// live brokers) and min.insync.replicas transaction.state.log.min.isr
// (capped at the replication factor), as Kafka does.
func (b *Broker) ensureTxnStateTopic() error {
	if _, ok := b.image.Load().Topics[TransactionStateTopic]; ok {
		return nil
	}
	rf := max(int16(min(b.cfg.Int("transaction.state.log.replication.factor"), int64(len(b.image.Load().BrokerIDs())))), 1)
	compact := "compact"
	segment := b.cfg.String("transaction.state.log.segment.bytes")
	minISR := strconv.FormatInt(min(b.cfg.Int("transaction.state.log.min.isr"), int64(rf)), 10)
	ctx, cancel := context.WithTimeout(b.ctx, controllerRequestTimeout)
	defer cancel()
	res := b.createTopicsAtController(ctx, []controller.TopicSpec{{
		Name:              TransactionStateTopic,
		NumPartitions:     b.txns.Config().NumPartitions,
		ReplicationFactor: rf,
		Configs: map[string]*string{"cleanup.policy": &compact, "segment.bytes": &segment,
			"min.insync.replicas": &minISR},
	}})[0]
	if res.Err != nil && !errors.Is(res.Err, kerr.TopicAlreadyExists) {
		return res.Err
	}
	if res.Err == nil {
		b.logger.Info("topic created", "topic", TransactionStateTopic, "partitions", res.NumPartitions, "replication.factor", res.ReplicationFactor)
	}
	return nil
}

// findTxnCoordinator answers FindCoordinator for a transactional id.
func (b *Broker) findTxnCoordinator(key string, c *kmsg.FindCoordinatorResponseCoordinator) error {
	if key == "" {
		return fmt.Errorf("%w: empty transactional id", kerr.InvalidRequest)
	}
	if err := b.ensureTxnStateTopic(); err != nil {
		return fmt.Errorf("%w: creating %s: %v", kerr.CoordinatorNotAvailable, TransactionStateTopic, err)
	}
	br, err := b.coordinatorFor(TransactionStateTopic, b.txns.PartitionFor(key))
	if err != nil {
		return err
	}
	c.NodeID, c.Host, c.Port = br.NodeID, br.Host, br.Port
	return nil
}

// initTransactional answers InitProducerId for a transactional id.
func (b *Broker) initTransactional(ctx context.Context, r *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) wire.Response {
	return wire.Response{Deferred: func() wire.Response {
		id, epoch, err := b.txns.InitProducerID(ctx, txn.InitProducerIDRequest{
			TransactionalID: *r.TransactionalID,
			TimeoutMs:       r.TransactionTimeoutMillis,
			ProducerID:      r.ProducerID,
			ProducerEpoch:   r.ProducerEpoch,
		})
		if err != nil {
			if errors.Is(err, producer.ErrIDsUnavailable) {
				err = fmt.Errorf("%w: %v", kerr.CoordinatorLoadInProgress, err)
			}
			b.logger.Debug("InitProducerId", "transactional.id", *r.TransactionalID, "err", err)
			resp.ErrorCode = fencedCode(err, r.Version, 4)
			return respond(resp)
		}
		resp.ProducerID, resp.ProducerEpoch = id, epoch
		return respond(resp)
	}}
}

func (b *Broker) handleAddPartitionsToTxn(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AddPartitionsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.Version < 4 {
		t := kmsg.NewAddPartitionsToTxnRequestTransaction()
		t.TransactionalID, t.ProducerID, t.ProducerEpoch = r.TransactionalID, r.ProducerID, r.ProducerEpoch
		for _, rt := range r.Topics {
			tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			tt.Topic, tt.Partitions = rt.Topic, rt.Partitions
			t.Topics = append(t.Topics, tt)
		}
		r.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{t}
	}
	return wire.Response{Deferred: func() wire.Response {
		for _, t := range r.Transactions {
			rt := b.addPartitionsToTxn(ctx, r.Version, &t)
			resp.Transactions = append(resp.Transactions, rt)
		}
		if r.Version < 4 {
			for _, tt := range resp.Transactions[0].Topics {
				st := kmsg.NewAddPartitionsToTxnResponseTopic()
				st.Topic = tt.Topic
				for _, tp := range tt.Partitions {
					sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
					sp.Partition, sp.ErrorCode = tp.Partition, tp.ErrorCode
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			resp.Transactions = nil
		}
		return respond(resp)
	}}
}

// addPartitionsToTxn adds (or, VerifyOnly, checks) one transaction's
// partitions. As in Kafka, when some partition is unknown, those get
// UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED.
func (b *Broker) addPartitionsToTxn(ctx context.Context, version int16, t *kmsg.AddPartitionsToTxnRequestTransaction) kmsg.AddPartitionsToTxnResponseTransaction {
	img := b.image.Load()
	var tps []txn.TopicPartition
	unknown := map[txn.TopicPartition]bool{}
	for _, rt := range t.Topics {
		for _, p := range rt.Partitions {
			tp := txn.TopicPartition{Topic: rt.Topic, Partition: p}
			tps = append(tps, tp)
			if _, _, ok := img.Partition(rt.Topic, p); !ok {
				unknown[tp] = true
			}
		}
	}
	var common error
	var errs map[txn.TopicPartition]error
	switch {
	case len(unknown) > 0:
		common = kerr.OperationNotAttempted
	case version >= 4 && !t.VerifyOnly:
		common = b.txns.AddPartitionsImplicitly(ctx, t.TransactionalID, t.ProducerID, t.ProducerEpoch, tps)
	default:
		errs, common = b.txns.AddPartitions(ctx, t.TransactionalID, t.ProducerID, t.ProducerEpoch, tps, t.VerifyOnly)
	}
	out := kmsg.NewAddPartitionsToTxnResponseTransaction()
	out.TransactionalID = t.TransactionalID
	for _, rt := range t.Topics {
		st := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		st.Topic = rt.Topic
		for _, p := range rt.Partitions {
			tp := txn.TopicPartition{Topic: rt.Topic, Partition: p}
			sp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			sp.Partition = p
			switch {
			case unknown[tp]:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case common != nil:
				sp.ErrorCode = fencedCode(common, version, 2)
			case errs[tp] != nil:
				sp.ErrorCode = errorCode(errs[tp])
			}
			st.Partitions = append(st.Partitions, sp)
		}
		out.Topics = append(out.Topics, st)
	}
	return out
}

func (b *Broker) handleAddOffsetsToTxn(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AddOffsetsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	return wire.Response{Deferred: func() wire.Response {
		err := b.ensureOffsetsTopic()
		if err != nil {
			err = fmt.Errorf("%w: creating __consumer_offsets: %v", kerr.CoordinatorNotAvailable, err)
		} else {
			tp := txn.TopicPartition{Topic: OffsetsTopic, Partition: b.groups.HashPartition(r.Group)}
			_, err = b.txns.AddPartitions(ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, []txn.TopicPartition{tp}, false)
		}
		resp.ErrorCode = fencedCode(err, r.Version, 2)
		return respond(resp)
	}}
}

func (b *Broker) handleEndTxn(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.EndTxnRequest)
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	return wire.Response{Deferred: func() wire.Response {
		id, epoch, err := b.txns.EndTxn(ctx, txn.EndTxnRequest{TransactionalID: r.TransactionalID,
			ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Commit: r.Commit, V2: r.Version >= 5})
		if err != nil {
			if errors.Is(err, producer.ErrIDsUnavailable) {
				err = fmt.Errorf("%w: %v", kerr.CoordinatorLoadInProgress, err)
			}
			b.logger.Debug("EndTxn", "transactional.id", r.TransactionalID, "commit", r.Commit, "err", err)
			id, epoch = -1, -1
		}
		resp.ErrorCode = fencedCode(err, r.Version, 2)
		resp.ProducerID, resp.ProducerEpoch = id, epoch
		return respond(resp)
	}}
}

// handleWriteTxnMarkers appends the markers a transaction coordinator
// sends, each once committed (acks=all), and ends the transactional offset
// commits of __consumer_offsets partitions.
func (b *Broker) handleWriteTxnMarkers(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.WriteTxnMarkersRequest)
	resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	return wire.Response{Deferred: func() wire.Response {
		wctx, cancel := context.WithTimeout(ctx, markerTimeout)
		defer cancel()
		for _, m := range r.Markers {
			errs := b.writeMarkers(wctx, &m)
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for i, t := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = t.Topic
				for j, p := range t.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					rp.ErrorCode = errorCode(errs[i][j])
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return respond(resp)
	}}
}

// markerTimeout bounds the wait for a marker's replication.
const markerTimeout = 30 * time.Second

// writeMarkers appends one transaction's markers to its partitions led
// here and returns each partition's error, indexed as m.Topics and their
// Partitions. Every marker is appended before any is waited for, so that
// they replicate together: the transaction completes in one replication
// round trip, not one per partition (Kafka appends them in one
// appendRecords and waits in one DelayedProduce).
func (b *Broker) writeMarkers(ctx context.Context, m *kmsg.WriteTxnMarkersRequestMarker) [][]error {
	img := b.image.Load()
	errs := make([][]error, len(m.Topics))
	type appended struct {
		i, j int
		p    *replica.Partition
		res  replica.MarkerResult
	}
	var done []appended
	for i, t := range m.Topics {
		errs[i] = make([]error, len(t.Partitions))
		for j, partition := range t.Partitions {
			p, err := b.hostedPartition(img, t.Topic, partition)
			if err != nil {
				errs[i][j] = err
				continue
			}
			res, err := p.AppendMarker(m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch)
			if err != nil {
				errs[i][j] = markerError(err)
				continue
			}
			done = append(done, appended{i, j, p, res})
		}
	}
	for _, a := range done {
		if a.res.Pending {
			if err := a.p.AwaitAcks(ctx, a.res.Offset+1, -1); err != nil {
				errs[a.i][a.j] = markerError(err)
				continue
			}
		}
		if t := m.Topics[a.i]; t.Topic == OffsetsTopic {
			// The transaction's offset commits are decided.
			b.groups.CompleteTransaction(t.Partitions[a.j], m.ProducerID, m.Committed)
		}
	}
	return errs
}

// markerError maps a marker append's error to its Kafka code.
func markerError(err error) error {
	switch {
	case errors.Is(err, producer.ErrInvalidProducerEpoch), errors.Is(err, producer.ErrCoordinatorFenced):
		return fmt.Errorf("%w: %v", kerr.ErrorForCode(producer.ErrorCode(err)), err)
	case errors.Is(err, replica.ErrNotLeader):
		return fmt.Errorf("%w: %v", kerr.NotLeaderForPartition, err)
	}
	return storageError(err)
}

// markerWriter is the coordinator's seam for WriteTxnMarkers: it sends each
// partition's marker to the partition's leader, this broker included
// (through the same handler path, without a socket).
type markerWriter struct {
	b *Broker

	mu      sync.Mutex
	clients map[int32]*interBrokerClient
}

// WriteMarkers implements txn.MarkerWriter. A partition whose topic is
// gone counts as done, as in Kafka; any other failure fails the call, and
// the coordinator retries every partition (a repeated marker for a
// producer with no open transaction ends nothing).
func (w *markerWriter) WriteMarkers(ctx context.Context, mk txn.Markers) error {
	b := w.b
	img := b.image.Load()
	byLeader := map[int32][]txn.TopicPartition{}
	for _, tp := range mk.Partitions {
		_, part, ok := img.Partition(tp.Topic, tp.Partition)
		if !ok {
			continue
		}
		if part.Leader < 0 {
			return fmt.Errorf("%w: %s[%d] has no leader", kerr.LeaderNotAvailable, tp.Topic, tp.Partition)
		}
		byLeader[part.Leader] = append(byLeader[part.Leader], tp)
	}
	marker := func(tps []txn.TopicPartition) kmsg.WriteTxnMarkersRequestMarker {
		m := kmsg.NewWriteTxnMarkersRequestMarker()
		m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = mk.ProducerID, mk.ProducerEpoch, mk.Commit, mk.CoordinatorEpoch
		for _, tp := range tps {
			if n := len(m.Topics); n > 0 && m.Topics[n-1].Topic == tp.Topic {
				m.Topics[n-1].Partitions = append(m.Topics[n-1].Partitions, tp.Partition)
				continue
			}
			t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			t.Topic, t.Partitions = tp.Topic, []int32{tp.Partition}
			m.Topics = append(m.Topics, t)
		}
		return m
	}
	// The leaders are written to at once: the transaction completes
	// when the slowest has its markers replicated, not after each in
	// turn.
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for leader, tps := range byLeader {
		m := marker(tps)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var failed []error
			if leader == b.nodeID {
				perPartition := b.writeMarkers(ctx, &m)
				for i, t := range m.Topics {
					for j, p := range t.Partitions {
						if err := perPartition[i][j]; err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
							failed = append(failed, fmt.Errorf("%s[%d]: %w", t.Topic, p, err))
						}
					}
				}
			} else if err := w.send(ctx, leader, m); err != nil {
				failed = append(failed, fmt.Errorf("leader %d: %w", leader, err))
			}
			mu.Lock()
			errs = append(errs, failed...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// send sends one WriteTxnMarkers to another broker.
func (w *markerWriter) send(ctx context.Context, leader int32, m kmsg.WriteTxnMarkersRequestMarker) error {
	c, err := w.client(leader)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	req.Markers = []kmsg.WriteTxnMarkersRequestMarker{m}
	rctx, cancel := context.WithTimeout(ctx, markerTimeout+5*time.Second)
	defer cancel()
	kresp, err := c.Request(rctx, req)
	if err != nil {
		return err
	}
	var errs []error
	for _, rm := range kresp.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, t := range rm.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && p.ErrorCode != kerr.UnknownTopicOrPartition.Code {
					errs = append(errs, fmt.Errorf("%s[%d]: %w", t.Topic, p.Partition, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// interBrokerClient is a client of one other broker on the inter-broker
// listener, with its TLS and SASL (interBrokerOpts), as the replica
// fetchers connect.
type interBrokerClient struct {
	addr string
	cl   leaderClient
}

// Request sends req to the broker, at the highest version both support.
func (c *interBrokerClient) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return c.cl.Request(ctx, req)
}

// client returns the inter-broker client of a broker, made for its
// current endpoint on the inter-broker listener.
func (w *markerWriter) client(id int32) (*interBrokerClient, error) {
	br := w.b.image.Load().Brokers[id]
	if br == nil {
		return nil, fmt.Errorf("%w: broker %d is not registered", kerr.BrokerNotAvailable, id)
	}
	ep := br.Endpoint(w.b.interBroker.Name)
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.clients[id]; c != nil && c.addr == addr {
		return c, nil
	} else if c != nil {
		c.cl.Close()
	}
	opts, err := w.b.interBrokerOpts()
	if err != nil {
		return nil, err
	}
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID("strata-txn-" + itoa(w.b.nodeID))}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	c := &interBrokerClient{addr: addr, cl: leaderClient{cl}}
	w.clients[id] = c
	return c, nil
}

// close closes the inter-broker connections.
func (w *markerWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, c := range w.clients {
		c.cl.Close()
		delete(w.clients, id)
	}
}

// addPartitionsToTxnErrors answers the request and each partition it
// names (v0-3) with code; the brokers' batched form (v4+) only at the top,
// as Kafka's AddPartitionsToTxnRequest.getErrorResponse.
func addPartitionsToTxnErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.AddPartitionsToTxnRequest), resp.(*kmsg.AddPartitionsToTxnResponse)
	out.ErrorCode = code
	for _, t := range r.Topics {
		rt := kmsg.NewAddPartitionsToTxnResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}

// writeTxnMarkersErrors answers each partition of each marker req names
// with code.
func writeTxnMarkersErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.WriteTxnMarkersRequest), resp.(*kmsg.WriteTxnMarkersResponse)
	for _, m := range r.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition, rp.ErrorCode = p, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		out.Markers = append(out.Markers, rm)
	}
}
