package faultproxy

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Forging: with Options.ForgeRate the proxy reads every request's header
// and decodes Produce requests and responses (bodies with kmsg). A Produce
// request with acks 1 or all is chosen with probability ForgeRate, one
// draw per request, if the broker has already acknowledged a batch through
// this proxy in each of its partitions. A chosen request is not forwarded:
// the proxy answers it with success, giving each partition's batch the
// base offset of the latest batch the broker acknowledged there. Those
// offsets hold other records, which consumers will read; the forged
// records are acknowledged and exist nowhere: lost writes, at offsets
// where other values are read (inconsistent offsets).
//
// A client expects a connection's responses in the order of its requests,
// so a forged response waits in the link's queue behind the responses to
// the requests forwarded before it.

// topicPartition names a partition.
type topicPartition struct {
	topic     string
	partition int32
}

// forgeState is the proxy-wide state of forging; mu guards lastBase (the
// rng is the proxy's, under Proxy.mu).
type forgeState struct {
	rate float64

	mu       sync.Mutex
	lastBase map[topicPartition]int64 // latest base offset the broker acknowledged

	requests atomic.Int64 // Produce requests forged
	records  atomic.Int64 // records in them
}

// queued is a request awaiting its response: forwarded (forged nil, the
// broker will answer id) or forged (the response to write).
type queued struct {
	id     int32
	forged []byte
}

// Forged is how many Produce requests the proxy answered itself.
func (p *Proxy) Forged() int64 { return p.forge.requests.Load() }

// ForgedRecords is how many records were in the Produce requests the proxy
// answered itself: each was acknowledged and never written.
func (p *Proxy) ForgedRecords() int64 { return p.forge.records.Load() }

// parseProduce decodes a Produce request frame (with its size prefix).
func parseProduce(frame []byte) (*kmsg.ProduceRequest, error) {
	r := kbin.Reader{Src: frame[4:]}
	r.Int16() // API key
	req := &kmsg.ProduceRequest{Version: r.Int16()}
	r.Int32() // correlation id
	r.NullableString()
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := r.Complete(); err != nil {
		return nil, fmt.Errorf("faultproxy: produce request header: %w", err)
	}
	if err := req.ReadFrom(r.Src); err != nil {
		return nil, fmt.Errorf("faultproxy: produce request: %w", err)
	}
	return req, nil
}

// forgeOrQueue decides a request's fate when forging: a chosen Produce
// request is answered here (answered true: do not forward it); any other
// request that gets a response is queued before it is forwarded.
func (p *Proxy) forgeOrQueue(l *link, key int16, frame []byte) (answered bool, err error) {
	id := int32(binary.BigEndian.Uint32(frame[8:]))
	if key != ProduceKey {
		l.mu.Lock()
		l.queue = append(l.queue, queued{id: id})
		l.mu.Unlock()
		return false, nil
	}
	req, err := parseProduce(frame)
	if err != nil {
		// Forward it: the broker answers a malformed request as it
		// should, or closes the connection.
		l.mu.Lock()
		l.queue = append(l.queue, queued{id: id})
		l.mu.Unlock()
		return false, nil
	}
	if req.Acks == 0 {
		return false, nil // no response to order
	}
	if resp := p.forged(id, req); resp != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.queue) == 0 {
			_, err := l.client.Write(resp)
			return true, err
		}
		l.queue = append(l.queue, queued{forged: resp})
		return true, nil
	}
	l.mu.Lock()
	l.queue = append(l.queue, queued{id: id})
	l.produceVersions[id] = req.Version
	l.mu.Unlock()
	return false, nil
}

// forged draws whether to forge req (correlation id id), and if so
// returns the response frame.
func (p *Proxy) forged(id int32, req *kmsg.ProduceRequest) []byte {
	p.mu.Lock()
	chosen := p.rng.Float64() < p.forge.rate
	p.mu.Unlock()
	if !chosen {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	records := 0
	p.forge.mu.Lock()
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, part := range t.Partitions {
			base, ok := p.forge.lastBase[topicPartition{t.Topic, part.Partition}]
			if !ok {
				p.forge.mu.Unlock()
				return nil
			}
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = part.Partition
			rp.BaseOffset = base
			rp.LogAppendTime = -1
			rt.Partitions = append(rt.Partitions, rp)
			records += countRecords(part.Records)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	p.forge.mu.Unlock()
	p.forge.requests.Add(1)
	p.forge.records.Add(int64(records))
	return responseFrame(id, resp)
}

// responseFrame frames resp as the response with correlation id id: the
// size, the response header (v1, with empty tagged fields, for flexible
// versions) and the body.
func responseFrame(id int32, resp *kmsg.ProduceResponse) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 4, 64), uint32(id))
	if resp.IsFlexible() {
		b = append(b, 0)
	}
	b = resp.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// countRecords counts the records of the batches in a Produce partition's
// records.
func countRecords(b []byte) int {
	n := 0
	for len(b) > 0 {
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(b); err != nil {
			return n
		}
		n += int(batch.NumRecords)
		size := 12 + int(batch.Length) // base offset and length precede Length's bytes
		if size <= 12 || size > len(b) {
			return n
		}
		b = b[size:]
	}
	return n
}

// learn records the base offsets the broker acknowledged in a Produce
// response.
func (p *Proxy) learn(l *link, id int32, frame []byte) {
	l.mu.Lock()
	version, ok := l.produceVersions[id]
	delete(l.produceVersions, id)
	l.mu.Unlock()
	if !ok {
		return
	}
	resp := &kmsg.ProduceResponse{Version: version}
	r := kbin.Reader{Src: frame[8:]} // after the size and correlation id
	if resp.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := resp.ReadFrom(r.Src); err != nil {
		return
	}
	p.forge.mu.Lock()
	defer p.forge.mu.Unlock()
	for _, t := range resp.Topics {
		for _, part := range t.Partitions {
			if part.ErrorCode != 0 || part.BaseOffset < 0 {
				continue
			}
			tp := topicPartition{t.Topic, part.Partition}
			if last, ok := p.forge.lastBase[tp]; !ok || part.BaseOffset > last {
				p.forge.lastBase[tp] = part.BaseOffset
			}
		}
	}
}

// respondInOrder writes the broker's response to id, then the forged
// responses queued behind it.
func (p *Proxy) respondInOrder(l *link, id int32, frame []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) > 0 && l.queue[0].forged == nil && l.queue[0].id == id {
		l.queue = l.queue[1:]
	}
	if _, err := l.client.Write(frame); err != nil {
		return err
	}
	for len(l.queue) > 0 && l.queue[0].forged != nil {
		if _, err := l.client.Write(l.queue[0].forged); err != nil {
			return err
		}
		l.queue = l.queue[1:]
	}
	return nil
}
