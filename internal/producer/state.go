package producer

import (
	"cmp"
	"math"
	"slices"

	"github.com/strata-io/strata/internal/record"
)

// NumBatchesToRetain is how many of a producer's latest batches a partition
// remembers: a retry of one of them is a duplicate. Kafka's producers keep at
// most five requests in flight per connection for this reason.
const NumBatchesToRetain = 5

// DefaultExpirationMs is producer.id.expiration.ms's default: a producer with
// no batch whose timestamp is within this long of now is forgotten.
const DefaultExpirationMs = 86400000

// DefaultExpirationCheckIntervalMs is
// producer.id.expiration.check.interval.ms's default: how often the broker
// calls Expire.
const DefaultExpirationCheckIntervalMs = 600000

// Kafka's "none" values (RecordBatch.NO_PRODUCER_EPOCH, NO_SEQUENCE,
// NO_TIMESTAMP).
const (
	noEpoch     int16 = -1
	noSequence  int32 = -1
	noTimestamp int64 = -1
)

// BatchMetadata describes one appended batch of a producer.
type BatchMetadata struct {
	FirstSeq        int32
	LastSeq         int32
	FirstOffset     int64
	LastOffsetDelta int32
	// Timestamp is the batch's max timestamp as stored in the log (the
	// broker's append time for LogAppendTime topics).
	Timestamp int64
}

// LastOffset is the offset of the batch's last record.
func (b BatchMetadata) LastOffset() int64 { return b.FirstOffset + int64(b.LastOffsetDelta) }

// producerEntry is what a partition knows of one producer id: Kafka's
// ProducerStateEntry.
type producerEntry struct {
	epoch int16
	// coordinatorEpoch and currentTxnFirstOffset are the transaction
	// coordinator's; -1 until transactions exist.
	coordinatorEpoch      int32
	currentTxnFirstOffset int64
	lastTimestamp         int64
	// batches[:count] are the latest batches of the current epoch, oldest
	// first.
	batches [NumBatchesToRetain]BatchMetadata
	count   int
}

func newEntry() producerEntry {
	return producerEntry{
		epoch:                 noEpoch,
		coordinatorEpoch:      -1,
		currentTxnFirstOffset: -1,
		lastTimestamp:         noTimestamp,
	}
}

// lastSeq is the last sequence of the latest batch, or -1.
func (e *producerEntry) lastSeq() int32 {
	if e.count == 0 {
		return noSequence
	}
	return e.batches[e.count-1].LastSeq
}

// setEpoch moves the entry to epoch, forgetting the batches of another one:
// sequences restart with each epoch.
func (e *producerEntry) setEpoch(epoch int16) {
	if e.epoch != epoch {
		e.epoch = epoch
		e.count = 0
	}
}

// addBatch records a batch of epoch, dropping the oldest when full.
func (e *producerEntry) addBatch(epoch int16, b BatchMetadata) {
	e.setEpoch(epoch)
	if e.count == NumBatchesToRetain {
		copy(e.batches[:], e.batches[1:])
		e.count--
	}
	e.batches[e.count] = b
	e.count++
	e.lastTimestamp = b.Timestamp
}

// findBatch returns the cached batch with exactly this sequence range.
func (e *producerEntry) findBatch(firstSeq, lastSeq int32) (BatchMetadata, bool) {
	for i := range e.count {
		if b := e.batches[i]; b.FirstSeq == firstSeq && b.LastSeq == lastSeq {
			return b, true
		}
	}
	return BatchMetadata{}, false
}

// apply updates the entry with a batch from the log, unchecked: Kafka's
// ProducerAppendInfo.append with origin REPLICATION.
func (e *producerEntry) apply(h *record.Header) {
	if h.IsControl() {
		// A transaction marker ends the producer's transaction. Its
		// coordinator epoch is in the record body, which the
		// transaction coordinator will read; the header is enough for
		// the rest.
		e.setEpoch(h.ProducerEpoch)
		e.lastTimestamp = h.MaxTimestamp
		e.currentTxnFirstOffset = -1
		return
	}
	e.addBatch(h.ProducerEpoch, metadataOf(h, h.BaseOffset))
	if h.IsTransactional() && e.currentTxnFirstOffset < 0 {
		e.currentTxnFirstOffset = h.BaseOffset
	}
}

func metadataOf(h *record.Header, firstOffset int64) BatchMetadata {
	return BatchMetadata{
		FirstSeq:        h.BaseSequence,
		LastSeq:         h.LastSequence(),
		FirstOffset:     firstOffset,
		LastOffsetDelta: h.LastOffsetDelta,
		Timestamp:       h.MaxTimestamp,
	}
}

// inSequence reports whether next is the sequence after last, wrapping from
// MaxInt32 to 0 as producers do.
func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || next == 0 && last == math.MaxInt32
}

// decrementSequence subtracts n ≥ 0 from seq, wrapping below 0 to MaxInt32:
// the inverse of record.IncrementSequence.
func decrementSequence(seq, n int32) int32 {
	if seq < n {
		return math.MaxInt32 - (n - seq) + 1
	}
	return seq - n
}

// PartitionState is the producer state of one partition: for each producer
// id that wrote to it, the epoch and the latest batches.
//
// It is not safe for concurrent use. The broker makes every call holding the
// partition's append lock, so that the state matches the log below its end
// offset exactly. Nothing it returns aliases its internals, except the
// *BatchMetadata from Append.Check (see there).
type PartitionState struct {
	producers map[int64]*producerEntry
	// ongoing maps the producers with an open transaction on the
	// partition to its first offset: Kafka's ongoingTxns.
	ongoing map[int64]int64
	// verifying are the producers whose first transactional write here
	// is being verified with the coordinator (verify.go), and lastGuard
	// the last guard handed out.
	verifying map[int64]verificationEntry
	lastGuard uint64
	append    Append
}

// NewPartitionState returns the state of a partition with no producers.
func NewPartitionState() *PartitionState {
	s := &PartitionState{producers: make(map[int64]*producerEntry), ongoing: make(map[int64]int64),
		verifying: make(map[int64]verificationEntry)}
	s.append.state = s
	return s
}

// track keeps ongoing in line with a producer's entry after a change.
func (s *PartitionState) track(id int64, e *producerEntry) {
	if e.currentTxnFirstOffset >= 0 {
		s.ongoing[id] = e.currentTxnFirstOffset
	} else {
		delete(s.ongoing, id)
	}
}

// retrack rebuilds ongoing from the entries.
func (s *PartitionState) retrack() {
	clear(s.ongoing)
	for id, e := range s.producers {
		s.track(id, e)
	}
}

// FirstUnstableOffset is the first offset of the oldest transaction open on
// the partition, or -1 when none is: the last stable offset is the smaller
// of it and the high watermark.
func (s *PartitionState) FirstUnstableOffset() int64 {
	first := int64(-1)
	for _, off := range s.ongoing {
		if first < 0 || off < first {
			first = off
		}
	}
	return first
}

// OngoingTransactions returns the producers with an open transaction and
// its first offset. The map is the caller's.
func (s *PartitionState) OngoingTransactions() map[int64]int64 {
	out := make(map[int64]int64, len(s.ongoing))
	for id, off := range s.ongoing {
		out[id] = off
	}
	return out
}

// Len is the number of producers the partition knows.
func (s *PartitionState) Len() int { return len(s.producers) }

// Reset forgets every producer, as Kafka's truncateFullyAndStartAt.
func (s *PartitionState) Reset() {
	clear(s.producers)
	clear(s.ongoing)
	clear(s.verifying)
	s.append.reset()
}

// Update applies a batch that is in the log, without checking it: for
// followers applying what they replicate and for rebuilding the state from
// the log. h.BaseOffset must be the offset the batch has in the log. Batches
// without a producer id are ignored, so callers may pass every batch.
func (s *PartitionState) Update(h record.Header) {
	if !h.HasProducerID() {
		return
	}
	e := s.producers[h.ProducerID]
	if e == nil {
		ne := newEntry()
		e = &ne
		s.producers[h.ProducerID] = e
	}
	e.apply(&h)
	s.track(h.ProducerID, e)
	if h.IsTransactional() {
		s.clearVerification(h.ProducerID)
	}
}

// Expire forgets the producers whose latest batch timestamp is
// expirationMs (producer.id.expiration.ms) or more before nowMs and that have
// no open transaction, as Kafka does, and returns how many it forgot. As in
// Kafka the timestamp is the one in the log (the producer's clock unless
// the topic uses LogAppendTime), so leader, followers and a rebuilt state
// agree.
func (s *PartitionState) Expire(nowMs, expirationMs int64) int {
	s.expireVerifications(nowMs, expirationMs)
	n := 0
	for id, e := range s.producers {
		if e.currentTxnFirstOffset < 0 && nowMs-e.lastTimestamp >= expirationMs {
			// No open transaction, so nothing in ongoing.
			delete(s.producers, id)
			n++
		}
	}
	return n
}

// ProducerInfo describes a producer for DescribeProducers (KIP-664).
type ProducerInfo struct {
	ProducerID    int64
	ProducerEpoch int16
	// LastSequence is -1 when no batch of the current epoch is cached.
	LastSequence int32
	// LastTimestamp is the max timestamp of the producer's latest batch,
	// -1 if none.
	LastTimestamp int64
	// CoordinatorEpoch and CurrentTxnStartOffset are -1 until transactions
	// exist.
	CoordinatorEpoch      int32
	CurrentTxnStartOffset int64
}

// Producers lists the partition's producers in producer id order. The slice
// is the caller's.
func (s *PartitionState) Producers() []ProducerInfo {
	out := make([]ProducerInfo, 0, len(s.producers))
	for id, e := range s.producers {
		out = append(out, ProducerInfo{
			ProducerID:            id,
			ProducerEpoch:         e.epoch,
			LastSequence:          e.lastSeq(),
			LastTimestamp:         e.lastTimestamp,
			CoordinatorEpoch:      e.coordinatorEpoch,
			CurrentTxnStartOffset: e.currentTxnFirstOffset,
		})
	}
	slices.SortFunc(out, func(a, b ProducerInfo) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
	return out
}

// LastBatches returns copies of the cached batches of producer id, oldest
// first, and its epoch; ok is false for an unknown producer.
func (s *PartitionState) LastBatches(id int64) (batches []BatchMetadata, epoch int16, ok bool) {
	e := s.producers[id]
	if e == nil {
		return nil, noEpoch, false
	}
	return slices.Clone(e.batches[:e.count]), e.epoch, true
}
