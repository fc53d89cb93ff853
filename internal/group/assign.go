package group

import (
	"bytes"
	"sort"
)

// The server-side assignors of KIP-848 groups (group.consumer.assignors).
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

func (c *Config) hasAssignor(name string) bool {
	for _, a := range c.ConsumerAssignors {
		if a == name {
			return true
		}
	}
	return false
}

// memberSpec is one member as an assignor sees it: its id and the topics it
// subscribes to that exist, in topic id order.
type memberSpec struct {
	id     string
	topics []topicID
}

type tp struct {
	topic     topicID
	partition int32
}

func tpLess(a, b tp) bool {
	if c := bytes.Compare(a.topic[:], b.topic[:]); c != 0 {
		return c < 0
	}
	return a.partition < b.partition
}

// assignUniform is the "uniform" assignor: every partition of a subscribed
// topic goes to exactly one member subscribed to it, the members' counts
// differ by at most one where subscriptions allow, and a partition stays
// with its previous owner whenever that keeps the balance (Kafka's
// UniformAssignor). members are in id order; numPartitions holds every
// subscribed topic; previous is the last target assignment.
func assignUniform(members []memberSpec, numPartitions map[topicID]int32, previous map[string]partitions) map[string]partitions {
	out := make(map[string]partitions, len(members))
	for _, m := range members {
		out[m.id] = make(partitions)
	}
	if len(members) == 0 {
		return out
	}
	if homogeneous(members) {
		assignUniformHomogeneous(members, numPartitions, previous, out)
	} else {
		assignUniformHeterogeneous(members, numPartitions, previous, out)
	}
	return out
}

func homogeneous(members []memberSpec) bool {
	for _, m := range members[1:] {
		if len(m.topics) != len(members[0].topics) {
			return false
		}
		for i, t := range m.topics {
			if t != members[0].topics[i] {
				return false
			}
		}
	}
	return true
}

// allPartitions lists the partitions of topics, in order.
func allPartitions(topics []topicID, numPartitions map[topicID]int32) []tp {
	var out []tp
	for _, t := range topics {
		for p := int32(0); p < numPartitions[t]; p++ {
			out = append(out, tp{t, p})
		}
	}
	return out
}

// retained lists a member's previous partitions that still exist and that
// it still subscribes to, in order.
func retained(m memberSpec, numPartitions map[topicID]int32, previous map[string]partitions) []tp {
	prev := previous[m.id]
	var out []tp
	for _, t := range m.topics {
		for _, p := range prev.sortedPartitions(t) {
			if p < numPartitions[t] {
				out = append(out, tp{t, p})
			}
		}
	}
	return out
}

func assignUniformHomogeneous(members []memberSpec, numPartitions map[topicID]int32, previous map[string]partitions, out map[string]partitions) {
	all := allPartitions(members[0].topics, numPartitions)
	minQuota := len(all) / len(members)
	extra := len(all) % len(members)
	taken := make(map[tp]bool, len(all))
	counts := make(map[string]int, len(members))
	gotExtra := make(map[string]bool)

	// Members keep up to their quota of what they had; members that had
	// more than the minimum keep one extra while extras remain.
	for _, m := range members {
		keep := retained(m, numPartitions, previous)
		n := min(len(keep), minQuota)
		if len(keep) > minQuota && extra > 0 {
			n++
			extra--
			gotExtra[m.id] = true
		}
		for _, p := range keep[:n] {
			if taken[p] {
				continue
			}
			taken[p] = true
			out[m.id].add(p.topic, p.partition)
			counts[m.id]++
		}
	}
	var free []tp
	for _, p := range all {
		if !taken[p] {
			free = append(free, p)
		}
	}
	// Fill members up to the minimum, then hand out the extras.
	for _, m := range members {
		for counts[m.id] < minQuota && len(free) > 0 {
			out[m.id].add(free[0].topic, free[0].partition)
			free = free[1:]
			counts[m.id]++
		}
	}
	for _, m := range members {
		if len(free) == 0 {
			break
		}
		if gotExtra[m.id] || extra == 0 {
			continue
		}
		out[m.id].add(free[0].topic, free[0].partition)
		free = free[1:]
		extra--
	}
}

func assignUniformHeterogeneous(members []memberSpec, numPartitions map[topicID]int32, previous map[string]partitions, out map[string]partitions) {
	subscribers := make(map[topicID][]string)
	for _, m := range members {
		for _, t := range m.topics {
			subscribers[t] = append(subscribers[t], m.id)
		}
	}
	owner := make(map[tp]string)
	counts := make(map[string]int, len(members))
	for _, m := range members {
		for _, p := range retained(m, numPartitions, previous) {
			if _, taken := owner[p]; taken {
				continue
			}
			owner[p] = m.id
			counts[m.id]++
		}
	}
	// Unowned partitions go to the least loaded subscriber.
	for _, t := range sortedTopicIDs(subscribers) {
		for p := int32(0); p < numPartitions[t]; p++ {
			k := tp{t, p}
			if _, taken := owner[k]; taken {
				continue
			}
			best := subscribers[t][0]
			for _, id := range subscribers[t][1:] {
				if counts[id] < counts[best] {
					best = id
				}
			}
			owner[k] = best
			counts[best]++
		}
	}
	// Move partitions from members to subscribers with at least two fewer
	// until no such move exists; every move lowers the sum of squared
	// counts, so this ends, and it moves only what balance requires.
	byMember := make(map[string][]tp)
	for p, id := range owner {
		byMember[id] = append(byMember[id], p)
	}
	for _, ps := range byMember {
		sort.Slice(ps, func(i, j int) bool { return tpLess(ps[i], ps[j]) })
	}
	for moved := true; moved; {
		moved = false
		order := make([]string, 0, len(members))
		for _, m := range members {
			order = append(order, m.id)
		}
		sort.SliceStable(order, func(i, j int) bool { return counts[order[i]] > counts[order[j]] })
		for _, from := range order {
			ps := byMember[from]
			for i := len(ps) - 1; i >= 0 && !moved; i-- {
				p := ps[i]
				to := ""
				for _, id := range subscribers[p.topic] {
					if counts[id] <= counts[from]-2 && (to == "" || counts[id] < counts[to]) {
						to = id
					}
				}
				if to == "" {
					continue
				}
				byMember[from] = append(ps[:i:i], ps[i+1:]...)
				byMember[to] = append(byMember[to], p)
				owner[p] = to
				counts[from]--
				counts[to]++
				moved = true
			}
			if moved {
				break
			}
		}
	}
	for p, id := range owner {
		out[id].add(p.topic, p.partition)
	}
}

// assignRange is the "range" assignor: for each topic, its subscribers in
// member id order get contiguous ranges of partitions, the first ones one
// partition more when they do not divide evenly, keeping previously
// assigned partitions where the quotas allow (Kafka's RangeAssignor).
func assignRange(members []memberSpec, numPartitions map[topicID]int32, previous map[string]partitions) map[string]partitions {
	out := make(map[string]partitions, len(members))
	subscribers := make(map[topicID][]string)
	for _, m := range members {
		out[m.id] = make(partitions)
		for _, t := range m.topics {
			subscribers[t] = append(subscribers[t], m.id)
		}
	}
	for _, t := range sortedTopicIDs(subscribers) {
		subs := subscribers[t]
		n := int(numPartitions[t])
		minQuota := n / len(subs)
		withExtra := n % len(subs)
		sticky := make(map[int32]bool)
		type unfilled struct {
			id        string
			remaining int
		}
		var potentiallyUnfilled []unfilled
		for _, id := range subs {
			var current []int32
			for _, p := range previous[id].sortedPartitions(t) {
				if int(p) < n {
					current = append(current, p)
				}
			}
			keep := min(len(current), minQuota)
			for _, p := range current[:keep] {
				sticky[p] = true
				out[id].add(t, p)
			}
			remaining := minQuota - len(current)
			if remaining < 0 && withExtra > 0 {
				withExtra--
				sticky[current[minQuota]] = true
				out[id].add(t, current[minQuota])
			} else {
				potentiallyUnfilled = append(potentiallyUnfilled, unfilled{id, remaining})
			}
		}
		var free []int32
		for p := int32(0); p < int32(n); p++ {
			if !sticky[p] {
				free = append(free, p)
			}
		}
		for _, u := range potentiallyUnfilled {
			remaining := u.remaining
			if withExtra > 0 {
				remaining++
				withExtra--
			}
			for ; remaining > 0 && len(free) > 0; remaining-- {
				out[u.id].add(t, free[0])
				free = free[1:]
			}
		}
	}
	return out
}
