package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestAssignReplicasSpreadsLeadersAndReplicas(t *testing.T) {
	brokers := []int32{1, 2, 3, 4, 5}
	for start := 0; start < len(brokers); start++ {
		for _, rf := range []int{1, 2, 3, 5} {
			got := assignReplicas(brokers, 20, rf, start)
			leaders := map[int32]int{}
			for p, replicas := range got {
				if len(replicas) != rf {
					t.Fatalf("start %d rf %d partition %d: %v", start, rf, p, replicas)
				}
				seen := map[int32]bool{}
				for _, r := range replicas {
					if seen[r] {
						t.Fatalf("start %d rf %d partition %d: broker %d twice in %v", start, rf, p, r, replicas)
					}
					seen[r] = true
				}
				leaders[replicas[0]]++
			}
			for _, b := range brokers {
				if leaders[b] != 4 {
					t.Fatalf("start %d rf %d: broker %d leads %d of 20 partitions, want 4", start, rf, b, leaders[b])
				}
			}
		}
	}
	if got := assignReplicas([]int32{7}, 3, 1, 0); len(got) != 3 || got[2][0] != 7 {
		t.Fatalf("one broker: %v", got)
	}
}

func TestValidateTopicName(t *testing.T) {
	for name, ok := range map[string]bool{
		"orders":                 true,
		"orders-created.v1_x":    true,
		"":                       false,
		".":                      false,
		"..":                     false,
		"with space":             false,
		"slash/":                 false,
		"ünïcode":                false,
		strings.Repeat("a", 249): true,
		strings.Repeat("a", 250): false,
		MetadataTopic:            false,
	} {
		err := ValidateTopicName(name)
		if (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
		if err != nil && !errors.Is(err, kerr.InvalidTopicException) {
			t.Errorf("%q: %v is not INVALID_TOPIC_EXCEPTION", name, err)
		}
	}
}

func TestRackAwareAssignmentSpansRacks(t *testing.T) {
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
	brokers := []int32{1, 2, 3, 4, 5, 6}
	arranged := rackAlternated(brokers, racks)
	for i := 1; i < len(arranged); i++ {
		if racks[arranged[i]] == racks[arranged[i-1]] {
			t.Fatalf("rack-alternated order %v puts two of rack %s together", arranged, racks[arranged[i]])
		}
	}
	for start := range 6 {
		got := assignReplicasRackAware(arranged, racks, 60, 3, start)
		leaders := map[int32]int{}
		for p, replicas := range got {
			seen := map[string]bool{}
			for _, r := range replicas {
				seen[racks[r]] = true
			}
			if len(replicas) != 3 || len(seen) != 3 {
				t.Fatalf("start %d partition %d: %v spans racks %v", start, p, replicas, seen)
			}
			leaders[replicas[0]]++
		}
		for _, b := range brokers {
			if leaders[b] != 10 {
				t.Fatalf("start %d: broker %d leads %d of 60", start, b, leaders[b])
			}
		}
	}
	// More replicas than racks: every rack first, then any broker.
	for _, replicas := range assignReplicasRackAware(arranged, racks, 12, 5, 0) {
		seen := map[int32]bool{}
		for _, r := range replicas {
			if seen[r] {
				t.Fatalf("broker %d twice in %v", r, replicas)
			}
			seen[r] = true
		}
		if len(replicas) != 5 {
			t.Fatalf("%v", replicas)
		}
	}
}
