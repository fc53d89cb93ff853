package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producerOpts make a client's writes safe to retry: idempotence (on by
// default in franz-go, spelled out here) gives each record a producer id
// and sequence number, so the broker drops a retried batch it already has;
// and acks=all answers only once the in-sync replicas have it, which
// idempotence requires.
func producerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}
}

// EnsureTopics creates the topics that do not exist yet, with partitions
// partitions and the broker's default replication factor. Every program
// creates what it touches, so they can start in any order.
func EnsureTopics(ctx context.Context, cl *kgo.Client, partitions int, topics ...string) error {
	resps, err := kadm.NewClient(cl).CreateTopics(ctx, int32(partitions), -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("creating topics %v: %w", topics, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// kgoLogger sends franz-go's warnings and errors to a slog.Logger.
type kgoLogger struct{ logger *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	switch level {
	case kgo.LogLevelError:
		l.logger.Error(msg, keyvals...)
	case kgo.LogLevelWarn:
		l.logger.Warn(msg, keyvals...)
	default:
		l.logger.Info(msg, keyvals...)
	}
}
