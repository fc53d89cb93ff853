package broker

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/internal/datadir"
)

// untar extracts a .tar.gz into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.Create(target)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}

// TestUpgradeFromSingleNodeMetadataLog starts on a data directory written
// by Strata before the metadata quorum (testdata/single-node-v0.tar.gz: the
// release binary of main 8655d96 after `topic create orders -p 3`, `topic
// create audit -p 1 -c retention.ms=86400000`, five records produced to
// orders and consumed by group payment, then SIGTERM). Topics, their ids
// and configuration, records and committed offsets must all be there, and
// stay there across a second restart.
func TestUpgradeFromSingleNodeMetadataLog(t *testing.T) {
	root := t.TempDir()
	untar(t, "testdata/single-node-v0.tar.gz", root)
	tb := &testBroker{dir: filepath.Join(root, "data")}
	tb.start(t, "127.0.0.1:0")
	t.Cleanup(func() { tb.Close() })

	check := func(when string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm := kadm.NewClient(newClient(t, tb.Addr()))
		topics, err := adm.ListTopics(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		orders := topics["orders"]
		if orders.Err != nil || len(orders.Partitions) != 3 || orders.ID.String() != "e8FM73XAQC1F9qSKACzg3g==" {
			t.Fatalf("%s: orders: %v, %d partitions, id %s", when, orders.Err, len(orders.Partitions), orders.ID)
		}
		cfgs, err := adm.DescribeTopicConfigs(ctx, "audit")
		if err != nil {
			t.Fatal(err)
		}
		if v, err := cfgs.On("audit", nil); err != nil || configValue(v.Configs, "retention.ms") != "86400000" {
			t.Fatalf("%s: audit's retention.ms: %v %v", when, v, err)
		}
		offsets, err := adm.FetchOffsets(ctx, "payment")
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		offsets.Each(func(o kadm.OffsetResponse) { committed += o.At })
		if committed != 5 {
			t.Fatalf("%s: group payment committed %d records, want 5", when, committed)
		}
		cl := newClient(t, tb.Addr(), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := map[string]string{}
		for len(got) < 5 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("%s: read %d of 5 records: %v", when, len(got), err)
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = string(r.Value) })
		}
		if got["o-1"] != "a" || got["o-5"] != "e" {
			t.Fatalf("%s: records %v", when, got)
		}
		// And the node takes new metadata.
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, "after-"+when); err != nil {
			t.Fatalf("%s: creating a topic: %v", when, err)
		}
	}
	check("upgrade")
	if _, err := os.Stat(filepath.Join(tb.dir, "__cluster_metadata-0", datadir.LegacyMetadataFile)); !os.IsNotExist(err) {
		t.Fatalf("%s still there after the import: %v", datadir.LegacyMetadataFile, err)
	}
	tb.restart(t)
	check("restart")
}

func configValue(cs []kadm.Config, name string) string {
	for _, c := range cs {
		if c.Key == name && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}
