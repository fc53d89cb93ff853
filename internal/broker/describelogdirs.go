package broker

import (
	"context"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeLogDirs: v1-4.
//
// Behavior: the one log directory, with the size of each hosted partition
// (all, or those asked for), offset lag 0 (there are no future replicas),
// and the file system's total and usable bytes (v4+).
func init() {
	register(api{key: kmsg.DescribeLogDirs, min: 1, max: 4, handle: (*Broker).handleDescribeLogDirs,
		authorize: clusterRule(auth.OpDescribe), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeLogDirsResponse).ErrorCode = code
		}})
}

func (b *Broker) handleDescribeLogDirs(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeLogDirsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = b.dir
	if abs, err := filepath.Abs(b.dir); err == nil {
		dir.Dir = abs // as Kafka reports it, whatever the working directory
	}
	var st unix.Statfs_t
	if err := unix.Statfs(b.dir, &st); err == nil {
		dir.TotalBytes = int64(st.Blocks) * st.Bsize
		dir.UsableBytes = int64(st.Bavail) * st.Bsize
	}
	want := func(string, int32) bool { return true }
	if r.Topics != nil {
		asked := map[tp]bool{}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				asked[tp{t.Topic, p}] = true
			}
		}
		want = func(topic string, p int32) bool { return asked[tp{topic, p}] }
	}
	byTopic := map[string]int{}
	b.partitionsMu.RLock()
	for key, p := range b.partitions {
		if !want(key.topic, key.partition) {
			continue
		}
		i, ok := byTopic[key.topic]
		if !ok {
			t := kmsg.NewDescribeLogDirsResponseDirTopic()
			t.Topic = key.topic
			dir.Topics = append(dir.Topics, t)
			i = len(dir.Topics) - 1
			byTopic[key.topic] = i
		}
		dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
		dp.Partition = key.partition
		dp.Size = p.Stats().Size
		dir.Topics[i].Partitions = append(dir.Topics[i].Partitions, dp)
	}
	b.partitionsMu.RUnlock()
	resp.Dirs = append(resp.Dirs, dir)
	return respond(resp)
}
