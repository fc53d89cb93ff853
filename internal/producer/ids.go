package producer

import (
	"fmt"
	"math"
	"sync"
)

// DefaultIDBlockSize is how many producer ids one reservation takes: Kafka's
// ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
const DefaultIDBlockSize = 1000

// ReserveIDs durably reserves the next block of producer ids and returns its
// first id; the block is the block size the allocator was made with. It must
// not return before the reservation survives a restart (the controller
// commits a producer-ids record to the metadata log), so that no id is ever
// handed out twice. It is called with the allocator's lock held and must not
// call back into the allocator.
type ReserveIDs func() (first int64, err error)

// IDAllocator hands out producer ids for InitProducerId from blocks reserved
// through a callback, as Kafka brokers take blocks of 1000 from the
// controller. Ids left in a block when the broker stops are never used. It
// is safe for concurrent use.
type IDAllocator struct {
	reserve   ReserveIDs
	blockSize int64

	// mu is held across reserve, so concurrent callers wait for one
	// reservation instead of each making their own.
	mu sync.Mutex
	// next and end bound the ids of the current block not yet handed out.
	next, end int64
}

// NewIDAllocator returns an allocator taking blocks of blockSize ids
// (DefaultIDBlockSize unless the controller says otherwise) from reserve. It
// reserves nothing until the first id is asked for.
func NewIDAllocator(blockSize int64, reserve ReserveIDs) *IDAllocator {
	if blockSize <= 0 {
		panic(fmt.Sprintf("producer: id block size %d is not positive", blockSize))
	}
	return &IDAllocator{reserve: reserve, blockSize: blockSize}
}

// NextID returns a producer id no one has had before. It returns
// ErrIDsUnavailable (wrapping the callback's error) when a block could not
// be reserved, and ErrIDsExhausted when the reserved block overlaps ids
// already handed out or ends past MaxInt64.
func (a *IDAllocator) NextID() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next == a.end {
		first, err := a.reserve()
		if err != nil {
			return -1, fmt.Errorf("%w: %w", ErrIDsUnavailable, err)
		}
		if first < a.end || first < 0 || first > math.MaxInt64-a.blockSize {
			return -1, fmt.Errorf("%w: block at %d of %d ids after ids below %d", ErrIDsExhausted, first, a.blockSize, a.end)
		}
		a.next, a.end = first, first+a.blockSize
	}
	id := a.next
	a.next++
	return id, nil
}

// InitIdempotent answers InitProducerId for a producer without a
// transactional id as Kafka's TransactionCoordinator does: a new producer id
// with epoch 0, whatever producer id and epoch the request carries (v3+).
// KIP-360's epoch bump applies to transactional ids; an idempotent producer
// that lost its sequence simply starts over under a fresh id, and a
// partition accepts any first sequence from an id it does not know. The
// broker answers ErrorCode(err).
func (a *IDAllocator) InitIdempotent() (producerID int64, epoch int16, err error) {
	id, err := a.NextID()
	if err != nil {
		return -1, -1, err
	}
	return id, 0, nil
}
