package broker

import (
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
)

// metadataLog keeps committed metadata records in the partition
// __cluster_metadata-0 of the data directory, one batch per change, each
// fsynced before the change is published.
type metadataLog struct {
	log *storage.Log
}

func openMetadataLog(m *storage.Manager) (*metadataLog, error) {
	cfg := storage.DefaultConfig()
	cfg.RetentionMs = -1
	cfg.RetentionBytes = -1
	cfg.SegmentBytes = 64 << 20
	cfg.MaxMessageBytes = math.MaxInt32
	l, err := m.GetOrCreate(controller.MetadataTopic, 0, cfg)
	if err != nil {
		return nil, fmt.Errorf("broker: opening the metadata log: %w", err)
	}
	// Opened from disk, it has the topic defaults (log.cleanup.policy may
	// say compact): the metadata log is replayed whole, never compacted.
	if err := l.SetConfig(cfg); err != nil {
		return nil, err
	}
	return &metadataLog{log: l}, nil
}

func (m *metadataLog) Append(records []metadata.Record) (int64, error) {
	now := time.Now().UnixMilli()
	recs := make([]record.Rec, len(records))
	for i := range records {
		key, value, err := records[i].Encode()
		if err != nil {
			return 0, err
		}
		recs[i] = record.Rec{Key: key, Value: value, Timestamp: now}
	}
	info, err := m.log.Append(record.Build(nil, recs), storage.AppendOptions{AssignOffsets: true, LogAppendTime: -1})
	if err != nil {
		return 0, err
	}
	if err := m.log.Flush(info.LastOffset + 1); err != nil {
		return 0, err
	}
	return info.LastOffset, nil
}

func (m *metadataLog) Replay(fn func(lastOffset int64, records []metadata.Record) error) error {
	var ferr error
	err := m.log.ReadBatches(m.log.LogStartOffset(), math.MaxInt32, func(h record.Header, batch []byte) bool {
		var recs []metadata.Record
		ferr = record.Records(batch, func(_, _ int64, r *kmsg.Record) error {
			rec, err := metadata.Decode(r.Key, r.Value)
			if err != nil {
				return err
			}
			recs = append(recs, rec)
			return nil
		})
		if ferr == nil {
			ferr = fn(h.LastOffset(), recs)
		}
		return ferr == nil
	})
	if err != nil {
		return err
	}
	return ferr
}
