package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/txn"
)

// Produce-side verification of transactional writes (KIP-890 part 1), and
// transactions version 2's implicit add (part 2, Produce v12+: the leader
// has the coordinator add the partition, AddPartitionsToTxn v5 without
// VerifyOnly, and the client sends no AddPartitionsToTxn).
// Before a transactional batch opens its producer's transaction on a
// partition, the leader asks the producer's transaction coordinator
// (AddPartitionsToTxn v4, VerifyOnly; in process when it is this broker)
// whether the partition is in the producer's ongoing transaction. A late
// batch of a transaction the coordinator already ended (KAFKA-17754's late
// produce) is refused with INVALID_TXN_STATE instead of opening a
// transaction no marker will close, which would hold the last stable
// offset back forever.
//
// The check and the append are not atomic (the coordinator is asked with
// no lock held), so, as in Kafka, the leader takes a verification guard
// in the partition's producer state before asking, a marker for the
// producer clears it, and the append opens a transaction only with the
// guard still in place (producer.VerificationGuard): a marker landing
// between the answer and the append makes the append INVALID_TXN_STATE.

// txnVerifyTimeout bounds a verification.
const txnVerifyTimeout = 10 * time.Second

// txnVerification is one produce request's partitions that need it, with
// the verification guard each partition's leader took
// (replica.StartTxnVerification): the append checks that no marker
// cleared it meanwhile.
type txnVerification struct {
	producerID int64
	epoch      int16
	partitions []txn.TopicPartition
	guards     map[txn.TopicPartition]producer.VerificationGuard
}

// needsTxnVerification lists the partitions of a transactional produce
// whose batches would open a transaction; nil when none does.
func (b *Broker) needsTxnVerification(img *metadata.Image, r *kmsg.ProduceRequest) *txnVerification {
	if r.TransactionID == nil {
		return nil
	}
	var v *txnVerification
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			p, err := b.hostedPartition(img, rt.Topic, rp.Partition)
			if err != nil || len(rp.Records) == 0 {
				continue
			}
			id, epoch, guard, needed := p.StartTxnVerification(rp.Records)
			if !needed {
				continue
			}
			if v == nil {
				v = &txnVerification{producerID: id, epoch: epoch, guards: map[txn.TopicPartition]producer.VerificationGuard{}}
			}
			tp := txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}
			v.partitions = append(v.partitions, tp)
			v.guards[tp] = guard
		}
	}
	return v
}

// verifyTxn asks the coordinator of transactionalID whether the partitions
// are in the producer's transaction, or with add (Produce v12+,
// transactions version 2) has it add them, and returns the produce error
// of each that is not (or of all, when the coordinator cannot tell).
func (b *Broker) verifyTxn(ctx context.Context, transactionalID string, v *txnVerification, add bool) map[txn.TopicPartition]error {
	produceError := verifyError
	if add {
		produceError = addError
	}
	out := map[txn.TopicPartition]error{}
	errs, common := b.txnPartitions(ctx, transactionalID, v, add)
	for _, tp := range v.partitions {
		if common != nil {
			out[tp] = produceError(common)
		} else if errs[tp] != nil {
			out[tp] = produceError(errs[tp])
		}
	}
	return out
}

// txnPartitions asks the coordinator of transactionalID (in process when
// it is this broker, AddPartitionsToTxn v4+ otherwise) to verify or add
// the partitions. It returns the coordinator's errors, per partition or
// common to all (a coordinator not reached is COORDINATOR_NOT_AVAILABLE).
func (b *Broker) txnPartitions(ctx context.Context, transactionalID string, v *txnVerification, add bool) (map[txn.TopicPartition]error, error) {
	coordinator, err := b.coordinatorFor(TransactionStateTopic, b.txns.PartitionFor(transactionalID))
	if err != nil {
		return nil, fmt.Errorf("%w: the transaction coordinator: %v", kerr.CoordinatorNotAvailable, err)
	}
	if coordinator.NodeID == b.nodeID {
		if add {
			return nil, b.txns.AddPartitionsImplicitly(ctx, transactionalID, v.producerID, v.epoch, v.partitions)
		}
		return b.txns.AddPartitions(ctx, transactionalID, v.producerID, v.epoch, v.partitions, true)
	}
	errs, err := b.verifyRemote(ctx, coordinator.NodeID, transactionalID, v, add)
	if err != nil && !errors.As(err, new(*kerr.Error)) {
		err = fmt.Errorf("%w: the transaction coordinator, broker %d: %v", kerr.CoordinatorNotAvailable, coordinator.NodeID, err)
	}
	return errs, err
}

// verifyRemote sends AddPartitionsToTxn v4+ to the coordinator: VerifyOnly
// unless add.
func (b *Broker) verifyRemote(ctx context.Context, coordinator int32, transactionalID string, v *txnVerification, add bool) (map[txn.TopicPartition]error, error) {
	c, err := b.txnMarkers.client(coordinator)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 5
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = transactionalID, v.producerID, v.epoch, !add
	for _, tp := range v.partitions {
		if n := len(t.Topics); n > 0 && t.Topics[n-1].Topic == tp.Topic {
			t.Topics[n-1].Partitions = append(t.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
		t.Topics = append(t.Topics, rt)
	}
	req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{t}
	kresp, err := c.Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	out := map[txn.TopicPartition]error{}
	for _, rt := range resp.Transactions {
		for _, t := range rt.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					out[txn.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = err
				}
			}
		}
	}
	if add && len(out) > 0 {
		// An add fails or succeeds as a whole: one error stands for all.
		for _, err := range out {
			return nil, err
		}
	}
	return out, nil
}

// verifyError is the produce error for a failed verification, as Kafka
// answers clients that predate TRANSACTION_ABORTABLE
// (ReplicaManager.appendRecordsWithTransactionVerification): what passes
// (the coordinator moving or loading, the previous transaction's markers
// still being written) is NOT_ENOUGH_REPLICAS, which producers retry.
func verifyError(err error) error {
	switch {
	case errors.Is(err, kerr.TransactionAbortable), errors.Is(err, kerr.InvalidProducerIDMapping):
		return fmt.Errorf("%w: %v", kerr.InvalidTxnState, err)
	case errors.Is(err, kerr.ProducerFenced):
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress),
		errors.Is(err, kerr.ConcurrentTransactions):
		return fmt.Errorf("%w: %v", kerr.NotEnoughReplicas, err)
	}
	return err
}

// addError is the produce error for a failed implicit add (Produce v12+),
// as Kafka's AddPartitionsToTxnManager answers it: a fenced epoch is
// INVALID_PRODUCER_EPOCH, what passes (the coordinator moving or loading,
// the previous transaction's markers still out) NOT_ENOUGH_REPLICAS, which
// producers retry, and the rest INVALID_TXN_STATE.
func addError(err error) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress),
		errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", kerr.NotEnoughReplicas, err)
	case errors.As(err, new(*kerr.Error)):
		return fmt.Errorf("%w: %v", kerr.InvalidTxnState, err)
	}
	return fmt.Errorf("%w: %v", kerr.NotEnoughReplicas, err)
}
