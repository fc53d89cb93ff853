package broker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/metadata"
)

// metaPropertiesFile is Kafka's per-log-dir identity file.
const metaPropertiesFile = "meta.properties"

// checkMetaProperties refuses to start on a data directory that belongs to
// another node or another cluster, as Kafka does.
func (b *Broker) checkMetaProperties() error {
	props, err := readMetaProperties(b.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if id, ok := props["node.id"]; ok && id != strconv.Itoa(int(b.nodeID)) {
		return fmt.Errorf("broker: %s belongs to node.id %s, but this node is %d", filepath.Join(b.dir, metaPropertiesFile), id, b.nodeID)
	}
	if want := b.cfg.String("cluster.id"); want != "" && props["cluster.id"] != "" && props["cluster.id"] != want {
		return fmt.Errorf("broker: %s belongs to cluster %s, but cluster.id is %s", filepath.Join(b.dir, metaPropertiesFile), props["cluster.id"], want)
	}
	return nil
}

func readMetaProperties(dir string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, metaPropertiesFile))
	if err != nil {
		return nil, err
	}
	kvs, err := config.ParseProperties(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("broker: %s: %w", metaPropertiesFile, err)
	}
	props := map[string]string{}
	for _, kv := range kvs {
		props[kv[0]] = kv[1]
	}
	return props, nil
}

// writeMetaProperties writes Kafka's KRaft meta.properties (version 1) if
// it is missing, atomically.
func (b *Broker) writeMetaProperties() error {
	if _, err := readMetaProperties(b.dir); err == nil {
		return nil
	}
	content := fmt.Sprintf("#\n#%s\nnode.id=%d\ndirectory.id=%s\nversion=1\ncluster.id=%s\n",
		time.Now().UTC().Format(time.UnixDate), b.nodeID, metadata.NewUUID(), b.ClusterID())
	tmp := filepath.Join(b.dir, metaPropertiesFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("broker: writing %s: %w", metaPropertiesFile, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("broker: writing %s: %w", metaPropertiesFile, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("broker: syncing %s: %w", metaPropertiesFile, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, metaPropertiesFile))
}
