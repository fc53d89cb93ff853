package storage

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-io/strata/internal/vfs"
)

// File names at the data-directory and partition level, as Kafka names them.
const (
	RecoveryPointCheckpointFile  = "recovery-point-offset-checkpoint"
	LogStartOffsetCheckpointFile = "log-start-offset-checkpoint"
	CleanerOffsetCheckpointFile  = "cleaner-offset-checkpoint"
	CleanShutdownFile            = ".kafka_cleanshutdown"
	LeaderEpochCheckpointFile    = "leader-epoch-checkpoint"
	HighWatermarkCheckpointFile  = "replication-offset-checkpoint"
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return fmt.Sprintf("%s-%d", tp.Topic, tp.Partition) }

// encodeCheckpoint renders Kafka's checkpoint text format: a version line
// "0", a count line, then one line per entry.
func encodeCheckpoint(lines []string) []byte {
	var b bytes.Buffer
	b.WriteString("0\n")
	b.WriteString(strconv.Itoa(len(lines)))
	b.WriteByte('\n')
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// decodeCheckpoint parses Kafka's checkpoint text format, checking the
// version, the count and that each line has fields fields.
func decodeCheckpoint(name string, data []byte, fields int) ([][]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return sc.Text(), true
	}
	v, ok := line()
	if !ok || strings.TrimSpace(v) != "0" {
		return nil, fmt.Errorf("storage: %s: unsupported version %q", name, v)
	}
	c, ok := line()
	n, err := strconv.Atoi(strings.TrimSpace(c))
	if !ok || err != nil || n < 0 {
		return nil, fmt.Errorf("storage: %s: bad entry count %q", name, c)
	}
	out := make([][]string, 0, min(n, 1<<16))
	for i := range n {
		l, ok := line()
		if !ok {
			return nil, fmt.Errorf("storage: %s: %d entries, expected %d", name, i, n)
		}
		f := strings.Fields(l)
		if len(f) != fields {
			return nil, fmt.Errorf("storage: %s: malformed line %q", name, l)
		}
		out = append(out, f)
	}
	if l, ok := line(); ok && strings.TrimSpace(l) != "" {
		return nil, fmt.Errorf("storage: %s: more than %d entries", name, n)
	}
	return out, sc.Err()
}

// encodeOffsetCheckpoint renders "topic partition offset" lines, sorted for
// stable output.
func encodeOffsetCheckpoint(offsets map[TopicPartition]int64) []byte {
	tps := make([]TopicPartition, 0, len(offsets))
	for tp := range offsets {
		tps = append(tps, tp)
	}
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
	lines := make([]string, len(tps))
	for i, tp := range tps {
		lines[i] = fmt.Sprintf("%s %d %d", tp.Topic, tp.Partition, offsets[tp])
	}
	return encodeCheckpoint(lines)
}

func decodeOffsetCheckpoint(name string, data []byte) (map[TopicPartition]int64, error) {
	lines, err := decodeCheckpoint(name, data, 3)
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]int64, len(lines))
	for _, f := range lines {
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		o, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("storage: %s: malformed line %q", name, strings.Join(f, " "))
		}
		out[TopicPartition{f[0], int32(p)}] = o
	}
	return out, nil
}

// ReadOffsetCheckpoint reads a recovery-point, log-start-offset,
// cleaner-offset or replication-offset checkpoint file. A missing file is an empty map.
func ReadOffsetCheckpoint(fs vfs.FS, path string) (map[TopicPartition]int64, error) {
	data, err := vfs.ReadFile(fs, path)
	if err != nil {
		if !vfs.Exists(fs, path) {
			return map[TopicPartition]int64{}, nil
		}
		return nil, err
	}
	return decodeOffsetCheckpoint(path, data)
}

// WriteOffsetCheckpoint writes a checkpoint file atomically.
func WriteOffsetCheckpoint(fs vfs.FS, path string, offsets map[TopicPartition]int64) error {
	return vfs.WriteFileAtomic(fs, path, encodeOffsetCheckpoint(offsets))
}
