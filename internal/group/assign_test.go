package group

import (
	"fmt"
	"math/rand"
	"testing"
)

func tid(n byte) topicID { return topicID{n} }

func specs(ids []string, topics ...topicID) []memberSpec {
	out := make([]memberSpec, len(ids))
	for i, id := range ids {
		out[i] = memberSpec{id: id, topics: topics}
	}
	return out
}

func memberIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%02d", i)
	}
	return ids
}

// checkAssignment verifies every partition of a subscribed topic is
// assigned exactly once, to a subscriber.
func checkAssignment(t *testing.T, members []memberSpec, numPartitions map[topicID]int32, a map[string]partitions) {
	t.Helper()
	owner := make(map[tp]string)
	subscribed := make(map[topicID]bool)
	for _, m := range members {
		subs := make(map[topicID]bool)
		for _, tt := range m.topics {
			subs[tt], subscribed[tt] = true, true
		}
		for tt, ps := range a[m.id] {
			if !subs[tt] {
				t.Fatalf("%s assigned unsubscribed topic %x", m.id, tt)
			}
			for p := range ps {
				if o, ok := owner[tp{tt, p}]; ok {
					t.Fatalf("partition %x-%d assigned to %s and %s", tt, p, o, m.id)
				}
				owner[tp{tt, p}] = m.id
			}
		}
	}
	for tt := range subscribed {
		for p := int32(0); p < numPartitions[tt]; p++ {
			if _, ok := owner[tp{tt, p}]; !ok {
				t.Fatalf("partition %x-%d unassigned", tt, p)
			}
		}
	}
}

func spread(a map[string]partitions) (lo, hi int) {
	lo = 1 << 30
	for _, ps := range a {
		n := ps.count()
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

func moved(before, after map[string]partitions) int {
	n := 0
	for id, ps := range after {
		for tt, m := range ps {
			for p := range m {
				if !before[id].has(tt, p) {
					n++
				}
			}
		}
	}
	return n
}

func TestUniformAssignorBalancedAndSticky(t *testing.T) {
	topics := map[topicID]int32{tid(1): 10, tid(2): 7}
	prev := map[string]partitions{}
	for _, n := range []int{1, 3, 4, 12, 5, 2} {
		members := specs(memberIDs(n), tid(1), tid(2))
		a := assignUniform(members, topics, prev)
		checkAssignment(t, members, topics, a)
		if lo, hi := spread(a); hi-lo > 1 {
			t.Fatalf("%d members: counts spread %d..%d", n, lo, hi)
		}
		if len(prev) > 0 {
			// Only what balance requires moves: at most the partitions a
			// member gains, which is bounded by the new quota per new
			// member (growing) or the leavers' partitions (shrinking).
			quota := (17 + n - 1) / n
			limit := quota * max(n-len(prev), 0)
			if n < len(prev) {
				for id := range prev {
					if _, ok := a[id]; !ok {
						limit += prev[id].count()
					}
				}
				limit += n // the extras may shift by one per member
			}
			if m := moved(prev, a); m > limit {
				t.Fatalf("%d -> %d members moved %d partitions, want at most %d", len(prev), n, m, limit)
			}
		}
		prev = a
	}
}

func TestUniformAssignorHeterogeneous(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	topics := map[topicID]int32{tid(1): 9, tid(2): 4, tid(3): 6}
	all := []topicID{tid(1), tid(2), tid(3)}
	prev := map[string]partitions{}
	for round := 0; round < 30; round++ {
		n := 1 + rng.Intn(8)
		members := make([]memberSpec, n)
		for i := range members {
			var ts []topicID
			for _, tt := range all {
				if rng.Intn(2) == 0 {
					ts = append(ts, tt)
				}
			}
			if len(ts) == 0 {
				ts = all[:1]
			}
			members[i] = memberSpec{id: fmt.Sprintf("m%d", i), topics: ts}
		}
		a := assignUniform(members, topics, prev)
		checkAssignment(t, members, topics, a)
		// Balanced as far as subscriptions allow: no partition could move
		// to another subscriber with two fewer.
		subs := make(map[topicID][]string)
		for _, m := range members {
			for _, tt := range m.topics {
				subs[tt] = append(subs[tt], m.id)
			}
		}
		for id, ps := range a {
			for tt := range ps {
				for _, other := range subs[tt] {
					if a[other].count() <= a[id].count()-2 {
						t.Fatalf("round %d: %s (%d) could give %x to %s (%d)", round, id, a[id].count(), tt, other, a[other].count())
					}
				}
			}
		}
		prev = a
	}
}

func TestRangeAssignor(t *testing.T) {
	topics := map[topicID]int32{tid(1): 7, tid(2): 7}
	members := specs(memberIDs(3), tid(1), tid(2))
	a := assignRange(members, topics, nil)
	checkAssignment(t, members, topics, a)
	// Co-partitioned topics: each member gets the same contiguous range of
	// both, the first one the extra partition.
	want := map[string][]int32{"m00": {0, 1, 2}, "m01": {3, 4}, "m02": {5, 6}}
	for id, ps := range want {
		for _, tt := range []topicID{tid(1), tid(2)} {
			got := a[id].sortedPartitions(tt)
			if fmt.Sprint(got) != fmt.Sprint(ps) {
				t.Fatalf("%s topic %x: %v, want %v", id, tt, got, ps)
			}
		}
	}
	// A fourth member takes partitions only from the ends of ranges: the
	// others keep what they had within their new quota.
	members4 := specs(memberIDs(4), tid(1), tid(2))
	b := assignRange(members4, topics, a)
	checkAssignment(t, members4, topics, b)
	for _, id := range []string{"m00", "m01", "m02"} {
		for tt, ps := range b[id] {
			for p := range ps {
				if !a[id].has(tt, p) {
					t.Fatalf("%s gained %x-%d instead of keeping its range", id, tt, p)
				}
			}
		}
	}
	if lo, hi := spread(b); lo != 2*1 || hi != 2*2 {
		t.Fatalf("spread %d..%d", lo, hi)
	}
}
