package broker

import (
	"slices"

	"github.com/strata-io/strata/internal/metadata"
)

// leaderHints collects the leaders that NOT_LEADER_OR_FOLLOWER answers
// name (KIP-951: Produce v10+, Fetch v12+ name the current leader, and the
// response lists its endpoint), so a client moves to the new leader
// without a Metadata round trip.
type leaderHints struct{ ids []int32 }

// note returns a partition's current leader and leader epoch from the
// image (-1, -1 when it has none) and remembers the leader.
func (h *leaderHints) note(img *metadata.Image, topic string, partition int32) (leader, epoch int32) {
	_, p, ok := img.Partition(topic, partition)
	if !ok || p.Leader < 0 {
		return -1, -1
	}
	if !slices.Contains(h.ids, p.Leader) {
		h.ids = append(h.ids, p.Leader)
	}
	return p.Leader, p.LeaderEpoch
}

// endpoints returns the noted leaders' registrations, in the order noted.
func (h *leaderHints) endpoints(img *metadata.Image) []*metadata.Broker {
	var out []*metadata.Broker
	for _, id := range h.ids {
		if br, ok := img.Brokers[id]; ok {
			out = append(out, br)
		}
	}
	return out
}

// rackOrNil is a broker's rack for a response's nullable field.
func rackOrNil(rack string) *string {
	if rack == "" {
		return nil
	}
	return &rack
}
