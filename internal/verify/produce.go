package verify

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// producerLog is one producer's sends. The producer goroutine appends;
// franz-go's promise callbacks fill in the outcomes; mu guards sends.
type producerLog struct {
	mu    sync.Mutex
	sends []Send
}

// snapshot copies the sends; an answer arriving later is not in the copy.
func (l *producerLog) snapshot() *producerLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &producerLog{sends: append([]Send(nil), l.sends...)}
}

// produceAll runs the producers until ctx ends or the records are all
// sent, waits (up to DrainTimeout) for the outstanding acknowledgements,
// and closes the producers, which fails what is still unanswered.
func (r *runner) produceAll(ctx context.Context) ([]*producerLog, error) {
	clients := make([]*kgo.Client, 0, r.cfg.Producers)
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for i := range r.cfg.Producers {
		opts := []kgo.Opt{
			kgo.ClientID(fmt.Sprintf("strata-verify-producer-%d", i)),
			kgo.DefaultProduceTopic(r.topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(r.cfg.Acks),
			kgo.RecordDeliveryTimeout(r.cfg.DeliveryTimeout),
			kgo.MaxBufferedRecords(1000),
		}
		if !r.cfg.Idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := r.client(opts...)
		if err != nil {
			return nil, fmt.Errorf("verify: starting producer %d: %w", i, err)
		}
		clients = append(clients, cl)
	}
	logs := make([]*producerLog, len(clients))
	var claimed atomic.Int64
	var wg sync.WaitGroup
	for i, cl := range clients {
		logs[i] = &producerLog{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(ctx, i, cl, logs[i], &claimed)
		}()
	}
	wg.Wait()

	c := &r.counters
	r.say("producing stopped after %s; waiting up to %s for %d outstanding acknowledgements",
		time.Since(r.start).Round(time.Millisecond), r.cfg.DrainTimeout, c.sent.Load()-c.acked.Load()-c.failed.Load())
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DrainTimeout)
	defer cancel()
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cl.Flush(flushCtx) // what is unanswered at the deadline stays so
		}()
	}
	wg.Wait()
	for _, cl := range clients {
		cl.Close()
	}
	clients = nil
	for i, l := range logs {
		logs[i] = l.snapshot()
	}
	return logs, nil
}

// produce sends one producer's records: record seq of producer id goes to
// partition (seq+id) mod partitions, keyed by its partition, paced to the
// producer's share of Rate.
func (r *runner) produce(ctx context.Context, id int, cl *kgo.Client, log *producerLog, claimed *atomic.Int64) {
	rate := float64(r.cfg.Rate) / float64(r.cfg.Producers)
	t0 := time.Now()
	for seq := int64(0); ctx.Err() == nil; seq++ {
		if r.cfg.Records > 0 && claimed.Add(1) > r.cfg.Records {
			return
		}
		if rate > 0 {
			// Pace by the schedule, not by the previous send, so that a
			// slow acknowledgement does not lower the rate.
			if wait := time.Until(t0.Add(time.Duration(float64(seq) / rate * float64(time.Second)))); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		}
		p := int32((seq + int64(id)) % int64(r.cfg.Partitions))
		value := Value(r.run, id, seq)
		log.mu.Lock()
		i := len(log.sends)
		log.sends = append(log.sends, Send{Producer: id, Seq: seq, Partition: p, Value: value, Offset: -1, SentNanos: r.since()})
		log.mu.Unlock()
		r.counters.sent.Add(1)
		rec := &kgo.Record{Topic: r.topic, Partition: p, Key: []byte("k" + strconv.Itoa(int(p))), Value: []byte(value)}
		// Not ctx: records already buffered when producing stops must still
		// be sent and answered.
		cl.Produce(context.Background(), rec, func(rec *kgo.Record, err error) {
			at := r.since()
			log.mu.Lock()
			s := &log.sends[i]
			s.AnswerNanos = at
			if err != nil {
				s.Error = strings.Join(strings.Fields(err.Error()), " ")
			} else {
				s.Acked, s.Offset = true, rec.Offset
			}
			log.mu.Unlock()
			if err != nil {
				r.counters.failed.Add(1)
			} else {
				r.counters.acked.Add(1)
			}
		})
	}
}
