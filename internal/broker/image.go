package broker

import (
	"maps"
	"net"
	"slices"
	"strconv"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/replica"
)

// applyImage brings the partitions this broker hosts in line with a new
// metadata image: it opens and leads new partitions, applies configuration
// changes, and deletes the partitions of removed topics. The controller's
// publisher calls it, on its own goroutine and under no controller lock,
// with every committed image in order (consecutive images may be
// coalesced into one call).
func (b *Broker) applyImage(old, img *metadata.Image) {
	b.imageMu.Lock()
	defer b.imageMu.Unlock()
	// Handlers see the new image only once this node acts on it: a client
	// told "this node coordinates your group" or "leads that partition"
	// must find the coordinator loaded and the partition open.
	defer b.image.Store(img)

	// Topics removed, or replaced by a topic of the same name and a new id.
	for id, t := range old.TopicsByID {
		if _, ok := img.TopicsByID[id]; !ok {
			b.removeTopic(t)
		}
	}
	// The dynamic broker configuration (cluster-wide or this node's) takes
	// effect at once: in the broker's settings, and as the defaults of
	// every topic's configuration.
	defaultsChanged := b.brokerConfigsChanged(old, img)
	if defaultsChanged {
		b.applySettings(b.resolveSettings(img))
	}
	for _, t := range img.Topics {
		oldT := old.TopicsByID[t.ID]
		configChanged := defaultsChanged || oldT == nil ||
			!maps.Equal(old.TopicConfig(t.Name), img.TopicConfig(t.Name))
		values := b.topicConfig(img, t.Name)
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if !slices.Contains(p.Replicas, b.nodeID) {
				continue
			}
			var oldP *metadata.Partition
			if oldT != nil && i < len(oldT.Partitions) {
				oldP = &oldT.Partitions[i]
			}
			b.applyPartition(old, img, t, int32(i), p, oldP, values, configChanged)
		}
	}
	b.applyCoordinator(old, img)
	if old.Offset < 0 {
		b.removeStrayLogs(img)
	}
}

// applyPartition opens a partition this broker hosts and applies its
// configuration and its state in img: leader, or follower of the leader
// (fetching from it), at the leader and partition epochs of img. oldImg
// is the image before. b.imageMu must be held.
func (b *Broker) applyPartition(oldImg, img *metadata.Image, t *metadata.Topic, index int32, p, old *metadata.Partition, values map[string]string, configChanged bool) {
	key := tp{t.Name, index}
	b.partitionsMu.RLock()
	r, ok := b.partitions[key]
	b.partitionsMu.RUnlock()
	if !ok {
		log, err := b.logs.GetOrCreate(t.Name, index, b.storageConfig(values))
		if err != nil {
			b.logger.Error("opening partition", "topic", t.Name, "partition", index, "err", err)
			return
		}
		r, err = replica.New(t.Name, index, log, b.replicaSettings(values), b.replicaOptions())
		if err != nil {
			b.logger.Error("opening partition", "topic", t.Name, "partition", index, "err", err)
			return
		}
		b.partitionsMu.Lock()
		b.partitions[key] = r
		b.partitionsMu.Unlock()
		// A log opened from disk at start-up has the broker's defaults
		// until now: give it its topic's configuration (compaction,
		// retention and segment overrides).
		configChanged = true
	}
	if configChanged {
		if err := r.SetSettings(b.replicaSettings(values)); err != nil {
			b.logger.Error("configuring partition", "topic", t.Name, "partition", index, "err", err)
		}
	}
	// A follower fetches again when its leader re-registered (perhaps at
	// another endpoint).
	leaderMoved := p.Leader >= 0 && oldImg.Brokers[p.Leader] != img.Brokers[p.Leader]
	changed := old == nil || !ok || old.LeaderEpoch != p.LeaderEpoch || old.Leader != p.Leader || old.PartitionEpoch != p.PartitionEpoch
	state := replica.State{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, ISR: p.ISR}
	switch {
	case p.Leader == b.nodeID:
		if changed {
			b.fetchers.unfollow(r)
			if err := r.BecomeLeader(state); err != nil {
				b.logger.Error("becoming leader", "topic", t.Name, "partition", index, "err", err)
			}
		}
	case changed || leaderMoved:
		// A follower, of p.Leader or (-1) of no one until the controller
		// elects one: it stops answering as leader, and fetches from the
		// leader's endpoint on the inter-broker listener.
		r.BecomeFollower(state)
		if p.Leader < 0 {
			b.fetchers.unfollow(r)
			return
		}
		leader := img.Brokers[p.Leader]
		if leader == nil {
			b.logger.Warn("following a leader that is not registered", "topic", t.Name, "partition", index, "leader", p.Leader)
			b.fetchers.unfollow(r)
			return
		}
		ep := leader.Endpoint(b.interBroker.Name)
		if err := b.fetchers.follow(r, t.ID, p.Leader, net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port)))); err != nil {
			b.logger.Error("following the leader", "topic", t.Name, "partition", index, "leader", p.Leader, "err", err)
		}
	}
}

// removeTopic closes and deletes the local partitions of a removed topic.
// b.imageMu must be held.
func (b *Broker) removeTopic(t *metadata.Topic) {
	n := 0
	for i := range t.Partitions {
		key := tp{t.Name, int32(i)}
		b.partitionsMu.Lock()
		r, ok := b.partitions[key]
		delete(b.partitions, key)
		b.partitionsMu.Unlock()
		if !ok {
			continue
		}
		b.fetchers.unfollow(r)
		if err := b.logs.Delete(t.Name, int32(i)); err != nil {
			b.logger.Error("deleting partition", "topic", t.Name, "partition", i, "err", err)
		}
		n++
	}
	b.logger.Info("topic deleted", "topic", t.Name, "id", t.ID, "partitions", n)
}

// removeStrayLogs deletes partition directories that no topic in the image
// owns: topics deleted while this broker was down, or whose deletion a crash
// interrupted.
func (b *Broker) removeStrayLogs(img *metadata.Image) {
	// Only by the metadata of the cluster this directory belongs to: an
	// image of another (or of a new) cluster says nothing of these logs.
	if props, err := readMetaProperties(b.dir); err == nil && props["cluster.id"] != "" && props["cluster.id"] != img.ClusterID {
		b.logger.Warn("not deleting partitions no topic owns: the metadata is of another cluster than this directory's",
			"cluster.id", img.ClusterID, "meta.properties", props["cluster.id"])
		return
	}
	for _, l := range b.logs.Logs() {
		if l.Topic() == controller.MetadataTopic {
			continue
		}
		if _, p, ok := img.Partition(l.Topic(), l.Partition()); ok && slices.Contains(p.Replicas, b.nodeID) {
			continue
		}
		b.logger.Warn("deleting a partition no topic owns", "topic", l.Topic(), "partition", l.Partition())
		if err := b.logs.Delete(l.Topic(), l.Partition()); err != nil {
			b.logger.Error("deleting stray partition", "topic", l.Topic(), "partition", l.Partition(), "err", err)
		}
	}
}
