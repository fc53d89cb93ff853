package broker

import (
	"context"
	"maps"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/datadir"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/replica"
)

// storeImage publishes img to the handlers and wakes those waiting for a
// new image.
func (b *Broker) storeImage(img *metadata.Image) {
	b.image.Store(img)
	b.imageNextMu.Lock()
	if b.imageNext != nil {
		close(b.imageNext)
		b.imageNext = nil
	}
	b.imageNextMu.Unlock()
}

// awaitImage waits until the image the handlers see satisfies ok, and
// reports whether it did before ctx ended.
func (b *Broker) awaitImage(ctx context.Context, ok func(*metadata.Image) bool) bool {
	for {
		// The channel first, then the check: an image stored between the
		// two closes the channel we wait on.
		b.imageNextMu.Lock()
		if b.imageNext == nil {
			b.imageNext = make(chan struct{})
		}
		next := b.imageNext
		b.imageNextMu.Unlock()
		if img := b.image.Load(); img != nil && ok(img) {
			return true
		}
		select {
		case <-next:
		case <-ctx.Done():
			return false
		}
	}
}

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
	defer b.storeImage(img)

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
	opened := b.openPartitions(img)
	for _, t := range img.Topics {
		oldT := old.TopicsByID[t.ID]
		configChanged := defaultsChanged || oldT == nil ||
			!maps.Equal(old.TopicConfig(t.Name), img.TopicConfig(t.Name))
		var settings *replica.Settings // resolved once per topic, when needed
		leaderThrottled, followerThrottled := throttledReplicas(img.TopicConfig(t.Name))
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if !slices.Contains(p.Replicas, b.nodeID) {
				continue
			}
			if r, ok := b.partition(t.Name, int32(i)); ok {
				r.SetThrottled(leaderThrottled.Has(int32(i), b.nodeID),
					followerThrottled.Has(int32(i), b.nodeID) && !slices.Contains(p.ISR, b.nodeID))
			}
			var oldP *metadata.Partition
			if oldT != nil && i < len(oldT.Partitions) {
				oldP = &oldT.Partitions[i]
			}
			key := tp{t.Name, int32(i)}
			if settings == nil && (configChanged || opened[key]) {
				s := b.replicaSettings(b.topicConfig(img, t.Name))
				settings = &s
			}
			b.applyPartition(old, img, t, int32(i), p, oldP, settings, opened[key])
		}
	}
	b.applyCoordinator(old, img)
	b.removeReassignedAway(img)
	if old.Offset < 0 {
		b.removeStrayLogs(img)
	}
}

// openPartitions opens the replicas img gives this broker that it does
// not have yet, several at a time (a restart opens thousands), and returns
// which it opened. b.imageMu must be held.
func (b *Broker) openPartitions(img *metadata.Image) map[tp]bool {
	type job struct {
		t     *metadata.Topic
		index int32
	}
	var jobs []job
	b.partitionsMu.RLock()
	for _, t := range img.Topics {
		for i := range t.Partitions {
			if _, ok := b.partitions[tp{t.Name, int32(i)}]; !ok && slices.Contains(t.Partitions[i].Replicas, b.nodeID) {
				jobs = append(jobs, job{t, int32(i)})
			}
		}
	}
	b.partitionsMu.RUnlock()
	opened := make(map[tp]bool, len(jobs))
	if len(jobs) == 0 {
		return opened
	}
	configs := map[string]replica.Settings{} // by topic, resolved once
	for _, j := range jobs {
		if _, ok := configs[j.t.Name]; !ok {
			configs[j.t.Name] = b.replicaSettings(b.topicConfig(img, j.t.Name))
		}
	}
	var mu sync.Mutex
	work := make(chan job)
	var wg sync.WaitGroup
	for range min(2*runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				settings := configs[j.t.Name]
				log, err := b.logs.GetOrCreate(j.t.Name, j.index, settings.Log)
				if err != nil {
					b.logger.Error("opening partition", "topic", j.t.Name, "partition", j.index, "err", err)
					continue
				}
				r, err := replica.New(j.t.Name, j.index, log, settings, b.replicaOptions())
				if err != nil {
					b.logger.Error("opening partition", "topic", j.t.Name, "partition", j.index, "err", err)
					continue
				}
				key := tp{j.t.Name, j.index}
				b.partitionsMu.Lock()
				b.partitions[key] = r
				b.partitionsMu.Unlock()
				mu.Lock()
				opened[key] = true
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	return opened
}

// applyPartition applies the configuration (settings, when it changed or
// the replica is newly opened) and the state in img of a partition this
// broker hosts: leader, or follower of the leader (fetching from it), at
// the leader and partition epochs of img. oldImg is the image before.
// b.imageMu must be held.
func (b *Broker) applyPartition(oldImg, img *metadata.Image, t *metadata.Topic, index int32, p, old *metadata.Partition, settings *replica.Settings, opened bool) {
	key := tp{t.Name, index}
	b.partitionsMu.RLock()
	r, ok := b.partitions[key]
	b.partitionsMu.RUnlock()
	if !ok {
		return // it failed to open, and said so
	}
	ok = !opened
	if settings != nil {
		// A log opened from disk at start-up has the broker's defaults
		// until now: it gets its topic's configuration (compaction,
		// retention and segment overrides) here.
		if err := r.SetSettings(*settings); err != nil {
			b.logger.Error("configuring partition", "topic", t.Name, "partition", index, "err", err)
		}
	}
	// A follower fetches again when its leader re-registered (perhaps at
	// another endpoint).
	leaderMoved := p.Leader >= 0 && oldImg.Brokers[p.Leader] != img.Brokers[p.Leader]
	changed := old == nil || !ok || old.LeaderEpoch != p.LeaderEpoch || old.Leader != p.Leader || old.PartitionEpoch != p.PartitionEpoch
	var ineligible []int32
	for _, id := range p.Replicas {
		if !img.Brokers[id].Eligible() {
			ineligible = append(ineligible, id)
		}
	}
	state := replica.State{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, Replicas: p.Replicas, ISR: p.ISR,
		Ineligible: ineligible, Removing: p.RemovingReplicas}
	switch {
	case p.Leader == b.nodeID:
		if changed {
			b.fetchers.unfollow(r)
			if err := r.BecomeLeader(state); err != nil {
				b.logger.Error("becoming leader", "topic", t.Name, "partition", index, "err", err)
			}
		} else {
			// A follower's broker was fenced, began shutting down or
			// came back: the leader stops or starts waiting for it.
			r.SetIneligible(ineligible)
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

// removeReassignedAway stops and deletes the replicas this broker hosts of
// partitions that img no longer places on it (a reassignment moved them
// away; Kafka's StopReplica with deletion): a leader stops leading first,
// so the produces waiting on it fail with NOT_LEADER_OR_FOLLOWER and their
// clients retry at the new leader. b.imageMu must be held.
func (b *Broker) removeReassignedAway(img *metadata.Image) {
	type gone struct {
		key tp
		r   *replica.Partition
		p   *metadata.Partition
	}
	var stale []gone
	b.partitionsMu.RLock()
	for key, r := range b.partitions {
		if key.topic == controller.MetadataTopic {
			continue
		}
		if _, p, ok := img.Partition(key.topic, key.partition); ok && !slices.Contains(p.Replicas, b.nodeID) {
			stale = append(stale, gone{key, r, p})
		}
	}
	b.partitionsMu.RUnlock()
	for _, g := range stale {
		g.r.BecomeFollower(replica.State{Leader: g.p.Leader, LeaderEpoch: g.p.LeaderEpoch, PartitionEpoch: g.p.PartitionEpoch,
			Replicas: g.p.Replicas, ISR: g.p.ISR})
		b.fetchers.unfollow(g.r)
		b.partitionsMu.Lock()
		delete(b.partitions, g.key)
		b.partitionsMu.Unlock()
		if err := b.logs.Delete(g.key.topic, g.key.partition); err != nil {
			b.logger.Error("deleting a reassigned partition", "topic", g.key.topic, "partition", g.key.partition, "err", err)
			continue
		}
		b.logger.Info("partition moved away: replica deleted", "topic", g.key.topic, "partition", g.key.partition, "replicas", g.p.Replicas)
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
	if props, err := datadir.ReadMetaProperties(b.dir); err == nil && props["cluster.id"] != "" && props["cluster.id"] != img.ClusterID {
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

// throttledReplicas parses a topic's leader. and
// follower.replication.throttled.replicas (validated when set: a value
// that does not parse throttles nothing).
func throttledReplicas(topicConfig map[string]string) (leader, follower config.ThrottledReplicas) {
	leader, _ = config.ParseThrottledReplicas(topicConfig["leader.replication.throttled.replicas"])
	follower, _ = config.ParseThrottledReplicas(topicConfig["follower.replication.throttled.replicas"])
	return leader, follower
}
