package replica

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/storage"
)

// Errors of the replica, each wrapping the Kafka error a broker answers.
// Storage errors (storage.ErrCorrupt, storage.ErrLogOffline, ...) are
// returned as storage returns them.
var (
	// ErrNotLeader is returned when a leader's operation reaches a replica
	// that does not lead (NOT_LEADER_OR_FOLLOWER).
	ErrNotLeader = fmt.Errorf("replica: %w", kerr.NotLeaderForPartition)
	// ErrFencedLeaderEpoch is returned when the caller's leader epoch is
	// older than this replica's (KIP-320).
	ErrFencedLeaderEpoch = fmt.Errorf("replica: %w", kerr.FencedLeaderEpoch)
	// ErrUnknownLeaderEpoch is returned when the caller's leader epoch is
	// newer than this replica's: this broker has not caught up with the
	// metadata yet (KIP-320).
	ErrUnknownLeaderEpoch = fmt.Errorf("replica: %w", kerr.UnknownLeaderEpoch)
	// ErrNotEnoughReplicas is returned by an acks=all append when the ISR
	// is smaller than min.insync.replicas; nothing was appended.
	ErrNotEnoughReplicas = fmt.Errorf("replica: %w", kerr.NotEnoughReplicas)
	// ErrOffsetOutOfRange is returned by reads of an offset outside the
	// log, and by DeleteRecordsBefore past the high watermark.
	ErrOffsetOutOfRange = fmt.Errorf("replica: %w", kerr.OffsetOutOfRange)
	// ErrUnsupportedTimestamp is returned by OffsetForTime for a negative
	// timestamp that names no special offset.
	ErrUnsupportedTimestamp = fmt.Errorf("replica: %w", kerr.UnsupportedVersion)
	// ErrTimedOut is returned by AwaitAcks when its context ends first.
	ErrTimedOut = fmt.Errorf("replica: %w", kerr.RequestTimedOut)
)

// outOfRange converts storage's out-of-range error to the replica's.
func outOfRange(err error) error {
	if errors.Is(err, storage.ErrOffsetOutOfRange) {
		return fmt.Errorf("%w: %v", ErrOffsetOutOfRange, err)
	}
	return err
}
