package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/producer"
	"github.com/strata-io/strata/internal/wire"
)

// InitProducerId: v0-5.
//
// Behavior:
// * Idempotent producers (no transactional id) get a new producer id with
// epoch 0, every time, as in Kafka; ids come from blocks reserved durably
// in the metadata log, so they are unique across restarts.
// * A transactional id goes to the transaction coordinator (internal/txn),
// which must be this broker (NOT_COORDINATOR otherwise).
func init() {
	register(api{key: kmsg.InitProducerID, min: 0, max: 5, handle: (*Broker).handleInitProducerID,
		authorize: authorizeInitProducerID, quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.InitProducerIDResponse)
			out.ErrorCode, out.ProducerID, out.ProducerEpoch = code, -1, -1
		}})
}

// producerExpirationCheckInterval is Kafka's
// producer.id.expiration.check.interval.ms default.
const producerExpirationCheckInterval = 10 * time.Minute

func (b *Broker) handleInitProducerID(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		return b.initTransactional(ctx, r, resp)
	}
	// Deferred: a new block of ids waits for the controller.
	return wire.Response{Deferred: func() wire.Response {
		id, epoch, err := b.producerIDs.InitIdempotent()
		if err != nil {
			b.logger.Warn("allocating a producer id", "err", err)
			resp.ErrorCode = producer.ErrorCode(err)
			return respond(resp)
		}
		resp.ProducerID, resp.ProducerEpoch = id, epoch
		return respond(resp)
	}}
}

// expireProducers forgets idle producers on every hosted partition.
func (b *Broker) expireProducers() {
	ms := b.settings.Load().producerIDExpirationMs
	b.partitionsMu.RLock()
	defer b.partitionsMu.RUnlock()
	n := 0
	for _, p := range b.partitions {
		n += p.ExpireProducers(ms)
	}
	if n > 0 {
		b.logger.Info("producer ids expired", "count", n, "producer.id.expiration.ms", ms)
	}
}
