package config

import (
	"errors"
	"strconv"
	"strings"
)

// ThrottledReplicas is a parsed leader.replication.throttled.replicas or
// follower.replication.throttled.replicas: every replica of the topic
// (All, "*"), or the partition:broker pairs listed.
type ThrottledReplicas struct {
	All   bool
	pairs map[[2]int32]bool
}

// ParseThrottledReplicas parses the value ("" throttles nothing).
func ParseThrottledReplicas(value string) (ThrottledReplicas, error) {
	var t ThrottledReplicas
	for _, entry := range SplitList(value) {
		if entry == "*" {
			t.All = true
			continue
		}
		p, b, ok := strings.Cut(entry, ":")
		partition, err1 := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
		broker, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
		if !ok || err1 != nil || err2 != nil || partition < 0 || broker < 0 {
			return ThrottledReplicas{}, errors.New("must be * or a list of partition:broker pairs, as 0:101,0:102,1:101")
		}
		if t.pairs == nil {
			t.pairs = map[[2]int32]bool{}
		}
		t.pairs[[2]int32{int32(partition), int32(broker)}] = true
	}
	if t.All && len(t.pairs) > 0 {
		return ThrottledReplicas{}, errors.New("* stands alone")
	}
	return t, nil
}

// Has reports whether the replica of partition on broker is throttled.
func (t ThrottledReplicas) Has(partition, broker int32) bool {
	return t.All || t.pairs[[2]int32{partition, broker}]
}

func checkThrottledReplicas(value string) error {
	_, err := ParseThrottledReplicas(value)
	return err
}
