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
	"github.com/strata-io/strata/internal/quota"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/txn"
	"github.com/strata-io/strata/internal/wire"
)

// Produce: v3-12 (v12 is transactions version 2, KIP-890 part 2; v13's
// topic ids are not offered).
//
// Behavior:
// * Only record batches (magic 2, v3+); every record of every batch is
// validated as Kafka's LogValidator does (storage.Log.ValidateProduced:
// CRC, sizes, counts, each record's framing, offset deltas, timestamps,
// compressed batches through bounded decoders), before the idempotence
// check, and stored exactly as sent, with offsets assigned in place. Where
// Kafka would rewrite a batch (inner offsets, max timestamp), Strata
// refuses it.
// * A malformed record answers INVALID_RECORD naming it in ErrorRecords
// for v8+, CORRUPT_MESSAGE before (which has no way to name it); a
// malformed batch CORRUPT_MESSAGE.
// * acks=0 gets no response; if any partition failed, the connection is
// closed instead, as Kafka does, so the producer notices.
// * acks=-1 waits for the high watermark (and, with flush.messages=1, for
// the fsync) up to the request timeout; acks=1 waits only for the fsync
// when flush.messages=1. Waits are deferred: the connection goes on
// reading while they last.
// * A replica that does not lead answers NOT_LEADER_OR_FOLLOWER with the
// current leader and its endpoint (v10+, KIP-951).
// * Producing to internal topics is refused (INVALID_TOPIC_EXCEPTION).
// * Transactional batches open their producer's transaction on the
// partition (internal/producer); the coordinator's markers end it. A batch
// that would open one is first verified with the coordinator (KIP-890
// part 1, txnverify.go): INVALID_TXN_STATE when the partition is not in the
// producer's ongoing transaction. From v12 (transactions version 2) the
// leader instead has the coordinator add the partition to the
// transaction: the client sends no AddPartitionsToTxn, and a batch of a
// fenced epoch (a late produce of an ended transaction) is
// INVALID_PRODUCER_EPOCH.
// * A record without a key on a compacted topic fails the partition with
// INVALID_RECORD, as in Kafka since KIP-467 (named in ErrorRecords for
// v8+).
func init() {
	register(api{key: kmsg.Produce, min: 3, max: 12, handle: (*Broker).handleProduce,
		authorize: authorizeProduce, errors: produceErrors, quota: produceQuota})
}

// produceQuota: a produce request's size counts against
// producer_byte_rate; one with acks=0 has no response to carry a throttle,
// so request_percentage does not count it.
var produceQuota = &quotaRule{bytes: quota.ProducerByteRate, exempt: func(req kmsg.Request) exemption {
	if req.(*kmsg.ProduceRequest).Acks == 0 {
		return uncounted
	}
	return counted
}}

type pendingAppend struct {
	part *replica.Partition
	resp *kmsg.ProduceResponseTopicPartition
	end  int64
}

func (b *Broker) handleProduce(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ProduceRequest)
	img := b.image.Load()
	if v := b.needsTxnVerification(img, r); v != nil {
		// On the connection's reader, not deferred: the requests of a
		// connection must append in order (a producer pipelines its
		// batches), and only the first batch of a transaction on a
		// partition waits for this.
		vctx, cancel := context.WithTimeout(ctx, txnVerifyTimeout)
		refused := b.verifyTxn(vctx, *r.TransactionID, v, r.Version >= 12)
		cancel()
		return b.produce(ctx, r, b.image.Load(), refused, v.guards)
	}
	return b.produce(ctx, r, img, nil, nil)
}

// produce appends a produce request's partitions, less those refused
// (transactional writes the coordinator did not verify), each with the
// verification guard its leader took (none: the zero guard, which opens
// no transaction).
func (b *Broker) produce(ctx context.Context, r *kmsg.ProduceRequest, img *metadata.Image, refused map[txn.TopicPartition]error,
	guards map[txn.TopicPartition]producer.VerificationGuard) wire.Response {
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	var pending []pendingAppend
	var leaders leaderHints
	failed := false

	validAcks := r.Acks == 0 || r.Acks == 1 || r.Acks == -1
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(r.Topics))
	for i := range r.Topics {
		rt := &r.Topics[i]
		st := &resp.Topics[i]
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &st.Partitions[j]
			*sp = kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			var err error
			switch {
			case !validAcks:
				err = fmt.Errorf("%w: acks must be 0, 1 or -1, not %d", kerr.InvalidRequiredAcks, r.Acks)
			case refused[txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}] != nil:
				err = refused[txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}]
			default:
				var p *replica.Partition
				p, err = b.producePartition(img, rt.Topic, rp.Partition)
				if err == nil {
					guard := guards[txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition}]
					err = b.appendProduced(p, rp.Records, r.Acks, r.Version, guard, sp, &pending)
				}
			}
			if err != nil {
				failed = true
				b.metrics.FailedProduceRequests.WithLabelValues(rt.Topic).Inc()
				sp.ErrorCode = errorCode(err)
				if r.Version >= 8 {
					sp.ErrorMessage = errorMessage(err)
				}
				sp.BaseOffset = -1
				if sp.ErrorCode == kerr.NotLeaderForPartition.Code && r.Version >= 10 {
					sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leaders.note(img, rt.Topic, rp.Partition)
				}
			}
		}
	}
	for _, n := range leaders.endpoints(img) {
		resp.Brokers = append(resp.Brokers, kmsg.ProduceResponseBroker{NodeID: n.NodeID, Host: n.Host, Port: n.Port, Rack: rackOrNil(n.Rack)})
	}

	if r.Acks == 0 {
		if failed {
			return wire.Response{NoResponse: true, Close: true}
		}
		b.flushInBackground(pending)
		return wire.Response{NoResponse: true}
	}
	if len(pending) == 0 {
		return respond(resp)
	}
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	return wire.Response{Deferred: func() wire.Response {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		for _, pa := range pending {
			if err := pa.part.AwaitAcks(wctx, pa.end, r.Acks); err != nil {
				pa.resp.ErrorCode = errorCode(storageError(err))
				if r.Version >= 8 {
					pa.resp.ErrorMessage = errorMessage(err)
				}
			}
		}
		return respond(resp)
	}}
}

// producePartition finds the local leader replica a produce names.
func (b *Broker) producePartition(img *metadata.Image, topic string, partition int32) (*replica.Partition, error) {
	if isInternalTopic(topic) {
		return nil, fmt.Errorf("%w: cannot produce to internal topic %s", kerr.InvalidTopicException, topic)
	}
	return b.hostedPartition(img, topic, partition)
}

// appendProduced appends one partition's records and fills its response;
// appends that must wait (acks=all, fsync) are added to pending.
func (b *Broker) appendProduced(p *replica.Partition, records []byte, acks, version int16, guard producer.VerificationGuard,
	sp *kmsg.ProduceResponseTopicPartition, pending *[]pendingAppend) error {
	if len(records) == 0 {
		return fmt.Errorf("%w: no record batches", kerr.CorruptMessage)
	}
	res, err := p.AppendVerified(records, acks, guard)
	if err != nil {
		var re *record.RecordError
		if errors.As(err, &re) && version >= 8 {
			sp.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{{RelativeOffset: re.Index, ErrorMessage: errorMessage(re)}}
			if !errors.Is(err, storage.ErrNullKey) {
				return fmt.Errorf("%w: %v", kerr.InvalidRecord, err)
			}
		}
		return storageError(err)
	}
	if !res.Duplicate {
		b.metrics.MessagesIn.WithLabelValues(p.Topic).Add(float64(res.NumRecords))
		b.metrics.BytesIn.WithLabelValues(p.Topic).Add(float64(res.Bytes))
	}
	sp.BaseOffset = res.FirstOffset
	sp.LogAppendTime = res.LogAppendTime
	sp.LogStartOffset = res.LogStartOffset
	if res.Pending {
		*pending = append(*pending, pendingAppend{part: p, resp: sp, end: res.LastOffset + 1})
	}
	return nil
}

// flushInBackground makes acks=0 appends durable when flush.messages=1
// (the only acks=0 appends pending), so the high watermark still advances
// though nobody waits for it.
func (b *Broker) flushInBackground(pending []pendingAppend) {
	for _, pa := range pending {
		go func() {
			if err := pa.part.AwaitAcks(b.ctx, pa.end, 0); err != nil {
				b.logger.Warn("flushing an acks=0 append", "topic", pa.part.Topic, "partition", pa.part.Index, "err", err)
			}
		}()
	}
}

// storageError maps storage and replica errors to Kafka codes.
func storageError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrCorrupt):
		return fmt.Errorf("%w: %v", kerr.CorruptMessage, err)
	case errors.Is(err, storage.ErrNullKey):
		return fmt.Errorf("%w: %v", kerr.InvalidRecord, err)
	case errors.Is(err, storage.ErrMessageTooLarge):
		return fmt.Errorf("%w: %v", kerr.MessageTooLarge, err)
	case errors.Is(err, storage.ErrRecordListTooLarge):
		return fmt.Errorf("%w: %v", kerr.RecordListTooLarge, err)
	case errors.Is(err, storage.ErrLogOffline):
		return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	case errors.Is(err, storage.ErrOffsetOutOfRange):
		return fmt.Errorf("%w: %v", kerr.OffsetOutOfRange, err)
	}
	if code := producer.ErrorCode(err); code != kerr.UnknownServerError.Code {
		return fmt.Errorf("%w: %v", kerr.ErrorForCode(code), err)
	}
	return err
}

// produceErrors answers each partition req names with code.
func produceErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.ProduceRequest), resp.(*kmsg.ProduceResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}
