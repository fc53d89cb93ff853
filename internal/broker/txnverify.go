package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/txn"
)

// Produce-side verification of transactional writes (KIP-890 part 1).
// Before a transactional batch opens its producer's transaction on a
// partition, the leader asks the producer's transaction coordinator
// (AddPartitionsToTxn v4, VerifyOnly; in process when it is this broker)
// whether the partition is in the producer's ongoing transaction. A late
// batch of a transaction the coordinator already ended (KAFKA-17754's late
// produce) is refused with INVALID_TXN_STATE instead of opening a
// transaction no marker will close, which would hold the last stable
// offset back forever.
//
// The check and the append are not atomic: a marker landing between them
// is not caught (Kafka closes that window with a verification guard that
// markers clear).

// txnVerifyTimeout bounds a verification.
const txnVerifyTimeout = 10 * time.Second

// txnVerification is one produce request's partitions that need it.
type txnVerification struct {
	producerID int64
	epoch      int16
	partitions []txn.TopicPartition
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
			id, epoch, opens := p.OpensTransaction(rp.Records)
			if !opens {
				continue
			}
			if v == nil {
				v = &txnVerification{producerID: id, epoch: epoch}
			}
			v.partitions = append(v.partitions, txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition})
		}
	}
	return v
}

// verifyTxn asks the coordinator of transactionalID whether the partitions
// are in the producer's transaction, and returns the produce error of each
// that is not (or of all, when the coordinator cannot tell).
func (b *Broker) verifyTxn(ctx context.Context, transactionalID string, v *txnVerification) map[txn.TopicPartition]error {
	out := map[txn.TopicPartition]error{}
	failAll := func(err error) map[txn.TopicPartition]error {
		for _, tp := range v.partitions {
			out[tp] = err
		}
		return out
	}
	coordinator, err := b.coordinatorFor(TransactionStateTopic, b.txns.PartitionFor(transactionalID))
	if err != nil {
		return failAll(fmt.Errorf("%w: verifying the transaction: %v", kerr.NotEnoughReplicas, err))
	}
	var errs map[txn.TopicPartition]error
	if coordinator.NodeID == b.nodeID {
		var common error
		errs, common = b.txns.AddPartitions(ctx, transactionalID, v.producerID, v.epoch, v.partitions, true)
		if common != nil {
			return failAll(verifyError(common))
		}
	} else {
		errs, err = b.verifyRemote(ctx, coordinator.NodeID, transactionalID, v)
		if err != nil {
			return failAll(fmt.Errorf("%w: verifying the transaction with broker %d: %v", kerr.NotEnoughReplicas, coordinator.NodeID, err))
		}
	}
	for tp, err := range errs {
		out[tp] = verifyError(err)
	}
	return out
}

// verifyRemote sends AddPartitionsToTxn v4 VerifyOnly to the coordinator.
func (b *Broker) verifyRemote(ctx context.Context, coordinator int32, transactionalID string, v *txnVerification) (map[txn.TopicPartition]error, error) {
	c, err := b.txnMarkers.client(coordinator)
	if err != nil {
		return nil, err
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	t := kmsg.NewAddPartitionsToTxnRequestTransaction()
	t.TransactionalID, t.ProducerID, t.ProducerEpoch, t.VerifyOnly = transactionalID, v.producerID, v.epoch, true
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
	return out, nil
}

// verifyError is the produce error for a failed verification, as Kafka
// answers clients that predate TRANSACTION_ABORTABLE.
func verifyError(err error) error {
	switch {
	case errors.Is(err, kerr.TransactionAbortable), errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.ConcurrentTransactions):
		return fmt.Errorf("%w: %v", kerr.InvalidTxnState, err)
	case errors.Is(err, kerr.ProducerFenced):
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.CoordinatorLoadInProgress):
		return fmt.Errorf("%w: %v", kerr.NotEnoughReplicas, err)
	}
	return err
}
