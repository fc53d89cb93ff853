// Package datadir reads and writes what a node keeps in its data
// directory besides the partitions' logs: Kafka's meta.properties, the
// identity of the node and of its cluster, and the metadata quorum's log
// (__cluster_metadata-0), which it opens and into which it imports the
// metadata log a single node wrote before the quorum existed. Node
// assembly uses it before the broker and the controller start; none of it
// is safe to call concurrently for one directory.
package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/quorum"
	"github.com/strata-io/strata/internal/record"
	"github.com/strata-io/strata/internal/storage"
	"github.com/strata-io/strata/internal/vfs"
)

// MetaPropertiesFile is Kafka's per-log-dir identity file.
const MetaPropertiesFile = "meta.properties"

// CheckMetaProperties refuses to start on a data directory that belongs to
// another node, or (clusterID, the configured cluster.id, set) to another
// cluster, as Kafka does. A directory without the file passes.
func CheckMetaProperties(dir string, nodeID int32, clusterID string) error {
	props, err := ReadMetaProperties(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if id, ok := props["node.id"]; ok && id != strconv.Itoa(int(nodeID)) {
		return fmt.Errorf("datadir: %s belongs to node.id %s, but this node is %d", filepath.Join(dir, MetaPropertiesFile), id, nodeID)
	}
	if clusterID != "" && props["cluster.id"] != "" && props["cluster.id"] != clusterID {
		return fmt.Errorf("datadir: %s belongs to cluster %s, but cluster.id is %s", filepath.Join(dir, MetaPropertiesFile), props["cluster.id"], clusterID)
	}
	return nil
}

// ReadMetaProperties reads dir's meta.properties; the error wraps
// fs.ErrNotExist when there is none.
func ReadMetaProperties(dir string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, MetaPropertiesFile))
	if err != nil {
		return nil, err
	}
	kvs, err := config.ParseProperties(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("datadir: %s: %w", MetaPropertiesFile, err)
	}
	props := map[string]string{}
	for _, kv := range kvs {
		props[kv[0]] = kv[1]
	}
	return props, nil
}

// WriteMetaProperties writes Kafka's KRaft meta.properties (version 1) for
// nodeID of clusterID into dir if it is missing, atomically.
func WriteMetaProperties(dir string, nodeID int32, clusterID string) error {
	if _, err := ReadMetaProperties(dir); err == nil {
		return nil
	}
	content := fmt.Sprintf("#\n#%s\nnode.id=%d\ndirectory.id=%s\nversion=1\ncluster.id=%s\n",
		time.Now().UTC().Format(time.UnixDate), nodeID, metadata.NewUUID(), clusterID)
	tmp := filepath.Join(dir, MetaPropertiesFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("datadir: writing %s: %w", MetaPropertiesFile, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("datadir: writing %s: %w", MetaPropertiesFile, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("datadir: syncing %s: %w", MetaPropertiesFile, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, MetaPropertiesFile))
}

// LegacyMetadataFile holds, during the first start after an upgrade, the
// image of a single node's metadata log from before the quorum, until the
// quorum has committed it.
const LegacyMetadataFile = "legacy-metadata.json"

// OpenMetadataLog opens __cluster_metadata-0, the Raft log of the metadata
// quorum.
func OpenMetadataLog(m *storage.Manager) (*storage.Log, error) {
	cfg := storage.DefaultConfig()
	cfg.RetentionMs = -1
	cfg.RetentionBytes = -1
	cfg.SegmentBytes = 64 << 20
	cfg.MaxMessageBytes = math.MaxInt32
	l, err := m.GetOrCreate(controller.MetadataTopic, 0, cfg)
	if err != nil {
		return nil, fmt.Errorf("datadir: opening the metadata log: %w", err)
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
// time, it saves the image to LegacyMetadataFile and empties the log for
// Raft; the file stays until the quorum is seeded with the image, so a
// crash in between loses nothing.
func takeLegacyMetadata(fs vfs.FS, l *storage.Log) (*metadata.Image, error) {
	path := filepath.Join(l.Dir(), LegacyMetadataFile)
	data, err := vfs.ReadFile(fs, path)
	switch {
	case err == nil:
		var recs []metadata.Record
		if err := json.Unmarshal(data, &recs); err != nil {
			return nil, fmt.Errorf("datadir: %s: %w", path, err)
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
		return nil, fmt.Errorf("datadir: reading the single-node metadata log to import it: %w", err)
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

// ImportLegacyMetadata seeds a new quorum with the metadata of a single
// node's log from before the quorum, if the log holds such, so that the
// first image the broker acts on has the topics it hosts.
func ImportLegacyMetadata(fs vfs.FS, wal *storage.Log, voters map[int32]string, logger *slog.Logger) error {
	img, err := takeLegacyMetadata(fs, wal)
	if err != nil || img == nil {
		return err
	}
	if len(voters) != 1 {
		return fmt.Errorf("datadir: %s holds the metadata log of a single node from before the metadata quorum; start it alone once (without controller.quorum.voters) to import it", wal.Dir())
	}
	data, err := controller.EncodeSnapshot(img)
	if err != nil {
		return err
	}
	if err := quorum.Seed(fs, wal, slices.Collect(maps.Keys(voters)), data); err != nil {
		return err
	}
	logger.Info("imported the metadata log of a single node", "cluster.id", img.ClusterID, "topics", len(img.Topics))
	err = fs.Remove(filepath.Join(wal.Dir(), LegacyMetadataFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
