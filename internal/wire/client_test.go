package wire

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/testutil/poll"
)

// TestFranzGo drives the server with a real client: franz-go must parse our
// framing at flexible and non-flexible versions, and the records it fetches
// from spliced regions must be the batches in the file, by sendfile and by
// copying.
func TestFranzGo(t *testing.T) {
	batch1 := makeBatch(0, "a", "b", "c")
	batch2 := makeBatch(3, "d")
	batch3 := makeBatch(0, "in", "memory")
	f := writeTestFile(t, slices.Concat(batch1, batch2))
	regions := map[int32]FileRegion{
		0: {File: f, Pos: 0, Len: int64(len(batch1) + len(batch2))},
		1: {File: f, Pos: int64(len(batch1)), Len: int64(len(batch2))},
		2: {File: memFile{bytes.NewReader(batch3)}, Pos: 0, Len: int64(len(batch3))},
		3: {File: f, Pos: 0, Len: 0},
	}
	want := map[int32][]string{0: {"a", "b", "c", "d"}, 1: {"d"}, 2: {"in", "memory"}, 3: nil}

	// Fetch v11 is the last without flexible versions, v12 the first with;
	// v13 names topics by id.
	for _, fetchMax := range []int16{4, 11, 12, 13, 18} {
		for _, copySplices := range []bool{false, true} {
			t.Run(fmt.Sprintf("fetch-v%d/copy=%v", fetchMax, copySplices), func(t *testing.T) {
				h := newTestHandler()
				h.versions[1] = VersionRange{4, fetchMax}
				h.regions = regions
				srv := startServer(t, h, func(c *Config) { c.CopySplices = copySplices })
				cl, err := kgo.NewClient(kgo.SeedBrokers(srv.addr))
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
				if err != nil {
					t.Fatal(err)
				}
				if av.ErrorCode != 0 || len(av.ApiKeys) != len(h.versions) {
					t.Fatalf("ApiVersions: error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
				}
				if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
					t.Fatal(err)
				}

				req := kmsg.NewPtrFetchRequest()
				req.MaxWaitMillis, req.MaxBytes = 0, 1<<20
				topic := kmsg.NewFetchRequestTopic()
				topic.Topic, topic.TopicID = "t", [16]byte{1, 2, 3}
				for p := range int32(5) {
					rp := kmsg.NewFetchRequestTopicPartition()
					rp.Partition, rp.PartitionMaxBytes = p, 1<<20
					topic.Partitions = append(topic.Partitions, rp)
				}
				req.Topics = append(req.Topics, topic)
				raw, err := cl.SeedBrokers()[0].Request(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				resp := raw.(*kmsg.FetchResponse)
				if resp.Version != fetchMax {
					t.Fatalf("client fetched at v%d, want v%d", resp.Version, fetchMax)
				}
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 5 {
					t.Fatalf("response has %d topics", len(resp.Topics))
				}
				for _, p := range resp.Topics[0].Partitions {
					region, ok := regions[p.Partition]
					if !ok {
						if p.ErrorCode == 0 {
							t.Errorf("partition %d: no error for a partition without records", p.Partition)
						}
						continue
					}
					data := make([]byte, region.Len)
					region.File.ReadAt(data, region.Pos)
					if !bytes.Equal(p.RecordBatches, data) {
						t.Errorf("partition %d: records differ from the file region", p.Partition)
					}
					if got := readBatches(t, p.RecordBatches); !slices.Equal(got, want[p.Partition]) {
						t.Errorf("partition %d: values %q, want %q", p.Partition, got, want[p.Partition])
					}
				}
				poll.Until(t, 10*time.Second, "Done for every response", func() bool { return h.done.Load() == h.handled.Load() })
			})
		}
	}
}

// TestFranzGoDowngradesApiVersions: a client asking for a newer ApiVersions
// than we speak gets UNSUPPORTED_VERSION and our range, and retries.
func TestFranzGoDowngradesApiVersions(t *testing.T) {
	h := newTestHandler()
	h.versions[18] = VersionRange{0, 2}
	srv := startServer(t, h)
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.Unsupported == 0 {
		t.Fatalf("the client never sent an unsupported ApiVersions version; stats %+v", st)
	}
}
