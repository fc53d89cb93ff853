package controller

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// TestReassignScripts runs reassignment (KIP-455) scripts: the commands of
// clusterScript, and
//
//	reassign [no-rf-change]     one AlterPartitionReassignments request; each
//	                            input line is "topic partition replicas",
//	                            replicas as 2,3,4 or "cancel"
//	list [topic=T partitions=0,1]  ListPartitionReassignments
//	config topic=T key=K value=V    set a topic's dynamic configuration
//	replicas                    every partition's replicas, adding and removing
func TestReassignScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/reassign", func(t *testing.T, path string) {
		img, err := metadata.Empty().Apply(0, metadata.Record{Cluster: &metadata.ClusterRecord{ClusterID: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		s := newClusterScript(img)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "reassign":
				return s.reassign(t, d)
			case "list":
				return s.list(t, d)
			case "config":
				var topic, key, value string
				d.ScanArgs(t, "topic", &topic)
				d.ScanArgs(t, "key", &key)
				d.ScanArgs(t, "value", &value)
				img, err := s.img.Apply(s.img.Offset+1, metadata.Record{Config: &metadata.ConfigRecord{
					ResourceType: metadata.ResourceTopic, ResourceName: topic, Name: key, Value: &value}})
				if err != nil {
					t.Fatal(err)
				}
				s.img = img
				return "ok\n"
			case "replicas":
				var out strings.Builder
				eachPartition(s.img, func(tp *metadata.Topic, index int32, p *metadata.Partition) {
					fmt.Fprintf(&out, "%s-%d replicas=%v adding=%v removing=%v leader=%d isr=%v\n", tp.Name, index,
						p.Replicas, p.AddingReplicas, p.RemovingReplicas, p.Leader, p.ISR)
				})
				return out.String()
			}
			return s.run(t, d)
		})
	})
}

func (s *clusterScript) reassign(t *testing.T, d *datadriven.TestData) string {
	var specs []Reassignment
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("reassign: %q is not \"topic partition replicas\"", line)
		}
		p, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatal(err)
		}
		spec := Reassignment{Topic: f[0], Partition: int32(p)}
		if f[2] != "cancel" {
			spec.Replicas = []int32{}
			for _, r := range strings.Split(f[2], ",") {
				n, err := strconv.Atoi(r)
				if err != nil {
					t.Fatal(err)
				}
				spec.Replicas = append(spec.Replicas, int32(n))
			}
		}
		specs = append(specs, spec)
	}
	records, errs := planReassignments(s.img, Policy{MinInsyncReplicas: 1}, specs, !d.HasArg("no-rf-change"))
	var out strings.Builder
	for _, r := range records {
		out.WriteString(s.describe(r) + "\n")
	}
	if len(records) > 0 {
		img, err := s.img.Apply(s.img.Offset+1, records...)
		if err != nil {
			t.Fatalf("planned records do not apply: %v", err)
		}
		s.img = img
	}
	for i, err := range errs {
		answer := "ok"
		if err != nil {
			var ke *kerr.Error
			if !errors.As(err, &ke) {
				t.Fatalf("not a Kafka error: %v", err)
			}
			answer = ke.Message + ", " + strings.TrimPrefix(err.Error(), ke.Error()+": ")
		}
		fmt.Fprintf(&out, "%s-%d: %s\n", specs[i].Topic, specs[i].Partition, answer)
	}
	return out.String()
}

func (s *clusterScript) list(t *testing.T, d *datadriven.TestData) string {
	var topics map[string][]int32
	if d.HasArg("topic") {
		var name string
		d.ScanArgs(t, "topic", &name)
		topics = map[string][]int32{name: ints(t, d, "partitions")}
	}
	var out strings.Builder
	for _, r := range listReassignments(s.img, topics) {
		fmt.Fprintf(&out, "%s-%d replicas=%v adding=%v removing=%v\n", r.Topic, r.Partition, r.Replicas, r.Adding, r.Removing)
	}
	if out.Len() == 0 {
		return "none\n"
	}
	return out.String()
}
