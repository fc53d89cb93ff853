package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// legacyMetadataFile holds, during the first start after an upgrade, the
// image of a single node's metadata log from before the quorum, until the
// quorum has committed it.
const legacyMetadataFile = "legacy-metadata.json"

// openMetadataLog opens __cluster_metadata-0, the Raft log of the metadata
// quorum.
func openMetadataLog(m *storage.Manager) (*storage.Log, error) {
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
	// say compact): the metadata log is never compacted or deleted by
	// retention; snapshots compact it.
	if err := l.SetConfig(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// takeLegacyMetadata returns the image of a metadata log written before the
// quorum (one record batch per change, JSON records), or nil. The first
// time, it saves the image to legacyMetadataFile and empties the log for
// Raft; the file stays until the quorum is seeded with the image, so a
// crash in between loses nothing.
func takeLegacyMetadata(fs vfs.FS, l *storage.Log) (*metadata.Image, error) {
	path := filepath.Join(l.Dir(), legacyMetadataFile)
	data, err := vfs.ReadFile(fs, path)
	switch {
	case err == nil:
		var recs []metadata.Record
		if err := json.Unmarshal(data, &recs); err != nil {
			return nil, fmt.Errorf("broker: %s: %w", path, err)
		}
		return metadata.Empty().Apply(int64(len(recs)-1), recs...)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if vfs.Exists(fs, filepath.Join(l.Dir(), quorum.StateFile)) || l.LogEndOffset() == 0 {
		return nil, nil
	}
	img := metadata.Empty()
	var ferr error
	err = l.ReadBatches(l.LogStartOffset(), math.MaxInt32, func(h record.Header, batch []byte) bool {
		var recs []metadata.Record
		ferr = record.Records(batch, func(_, _ int64, r *kmsg.Record) error {
			rec, err := metadata.Decode(r.Key, r.Value)
			recs = append(recs, rec)
			return err
		})
		if ferr == nil {
			img, ferr = img.Apply(h.LastOffset(), recs...)
		}
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, fmt.Errorf("broker: reading the single-node metadata log to import it: %w", err)
	}
	data, err = json.Marshal(img.Records())
	if err != nil {
		return nil, err
	}
	if err := vfs.WriteFileAtomic(fs, path, data); err != nil {
		return nil, err
	}
	if err := l.TruncateFullyAndStartAt(0); err != nil {
		return nil, err
	}
	return img, nil
}

// importLegacyMetadata seeds a new quorum with the metadata of a single
// node's log from before the quorum, if the log holds such, so that the
// first image the broker acts on has the topics it hosts.
func importLegacyMetadata(fs vfs.FS, wal *storage.Log, voters map[int32]string, logger *slog.Logger) error {
	img, err := takeLegacyMetadata(fs, wal)
	if err != nil || img == nil {
		return err
	}
	if len(voters) != 1 {
		return fmt.Errorf("broker: %s holds the metadata log of a single node from before the metadata quorum; start it alone once (without controller.quorum.voters) to import it", wal.Dir())
	}
	data, err := controller.EncodeSnapshot(img)
	if err != nil {
		return err
	}
	if err := quorum.Seed(fs, wal, slices.Collect(maps.Keys(voters)), data); err != nil {
		return err
	}
	logger.Info("imported the metadata log of a single node", "cluster.id", img.ClusterID, "topics", len(img.Topics))
	err = fs.Remove(filepath.Join(wal.Dir(), legacyMetadataFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
