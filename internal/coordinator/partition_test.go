package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/coordinator"
)

func TestAppendError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want *kerr.Error
	}{
		{nil, nil},
		{coordinator.ErrUnloaded, kerr.NotCoordinator},
		{context.Canceled, kerr.NotCoordinator},
		{context.DeadlineExceeded, kerr.CoordinatorNotAvailable},
		{fmt.Errorf("replica: %w", kerr.NotLeaderForPartition), kerr.NotCoordinator},
		{kerr.KafkaStorageError, kerr.NotCoordinator},
		{kerr.UnknownTopicOrPartition, kerr.CoordinatorNotAvailable},
		{kerr.NotEnoughReplicas, kerr.CoordinatorNotAvailable},
		{kerr.NotEnoughReplicasAfterAppend, kerr.CoordinatorNotAvailable},
		{kerr.RequestTimedOut, kerr.CoordinatorNotAvailable},
		{kerr.MessageTooLarge, kerr.UnknownServerError},
		{kerr.RecordListTooLarge, kerr.UnknownServerError},
		{kerr.InvalidFetchSize, kerr.UnknownServerError},
		{kerr.InvalidProducerEpoch, kerr.InvalidProducerEpoch},
		{errors.New("disk on fire"), kerr.UnknownServerError},
	} {
		if got := coordinator.AppendError(tc.err); got != tc.want {
			t.Errorf("AppendError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
