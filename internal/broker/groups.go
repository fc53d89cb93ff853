package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/group"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/replica"
	"github.com/strata-io/strata/internal/wire"
)

// Group APIs. The coordinator (internal/group) implements the protocol;
// these handlers route requests to it and run the ones that wait for a
// rebalance or for a write to __consumer_offsets as deferred responses, so
// the connection goes on reading meanwhile.
//
// JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5,
// OffsetCommit v2-9, OffsetFetch v1-9, OffsetDelete v0, ListGroups v0-5,
// DescribeGroups v0-5, DeleteGroups v0-2, ConsumerGroupHeartbeat v0-1 and
// ConsumerGroupDescribe v0-1 (KIP-848).
func init() {
	register(api{key: kmsg.JoinGroup, min: 0, max: 9, handle: (*Broker).handleJoinGroup, quota: requestTime,
		authorize: groupReadRule(func(r kmsg.Request) string { return r.(*kmsg.JoinGroupRequest).Group }),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			out := resp.(*kmsg.JoinGroupResponse)
			out.ErrorCode, out.Generation = code, -1
		}})
	register(api{key: kmsg.SyncGroup, min: 0, max: 5, handle: (*Broker).handleSyncGroup, quota: requestTime,
		authorize: groupReadRule(func(r kmsg.Request) string { return r.(*kmsg.SyncGroupRequest).Group }),
		errors:    func(_ kmsg.Request, resp kmsg.Response, code int16) { resp.(*kmsg.SyncGroupResponse).ErrorCode = code }})
	register(api{key: kmsg.Heartbeat, min: 0, max: 4, handle: (*Broker).handleHeartbeat, quota: requestTime,
		authorize: groupReadRule(func(r kmsg.Request) string { return r.(*kmsg.HeartbeatRequest).Group }),
		errors:    func(_ kmsg.Request, resp kmsg.Response, code int16) { resp.(*kmsg.HeartbeatResponse).ErrorCode = code }})
	register(api{key: kmsg.LeaveGroup, min: 0, max: 5, handle: (*Broker).handleLeaveGroup, quota: requestTime,
		authorize: groupReadRule(func(r kmsg.Request) string { return r.(*kmsg.LeaveGroupRequest).Group }),
		errors:    func(_ kmsg.Request, resp kmsg.Response, code int16) { resp.(*kmsg.LeaveGroupResponse).ErrorCode = code }})
	register(api{key: kmsg.OffsetCommit, min: 2, max: 9, handle: (*Broker).handleOffsetCommit, quota: requestTime,
		authorize: authorizeOffsetCommit, errors: offsetCommitErrors})
	register(api{key: kmsg.OffsetFetch, min: 1, max: 9, handle: (*Broker).handleOffsetFetch, quota: requestTime,
		authorize: authorizeOffsetFetch, errors: offsetFetchErrors})
	register(api{key: kmsg.OffsetDelete, min: 0, max: 0, handle: (*Broker).handleOffsetDelete, quota: requestTime,
		authorize: authorizeOffsetDelete,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.OffsetDeleteResponse).ErrorCode = code
		}})
	register(api{key: kmsg.ListGroups, min: 0, max: 5, handle: (*Broker).handleListGroups, quota: requestTime,
		authorize: authorizeListGroups,
		errors:    func(_ kmsg.Request, resp kmsg.Response, code int16) { resp.(*kmsg.ListGroupsResponse).ErrorCode = code }})
	register(api{key: kmsg.DescribeGroups, min: 0, max: 5, handle: (*Broker).handleDescribeGroups, quota: requestTime,
		authorize: authorizeDescribeGroups, errors: describeGroupsErrors})
	register(api{key: kmsg.DeleteGroups, min: 0, max: 2, handle: (*Broker).handleDeleteGroups, quota: requestTime,
		authorize: authorizeDeleteGroups, errors: deleteGroupsErrors})
	register(api{key: kmsg.ConsumerGroupHeartbeat, min: 0, max: 1, handle: (*Broker).handleConsumerGroupHeartbeat, quota: requestTime,
		authorize: groupReadRule(func(r kmsg.Request) string { return r.(*kmsg.ConsumerGroupHeartbeatRequest).Group }),
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode = code
		}})
	register(api{key: kmsg.ConsumerGroupDescribe, min: 0, max: 1, handle: (*Broker).handleConsumerGroupDescribe, quota: requestTime,
		authorize: authorizeConsumerGroupDescribe, errors: consumerGroupDescribeErrors})
}

// groupConfig converts the server configuration.
func groupConfig(cfg *config.Server) group.Config {
	c := group.DefaultConfig()
	c.OffsetsTopicNumPartitions = int32(cfg.Int("offsets.topic.num.partitions"))
	c.InitialRebalanceDelayMs = int32(cfg.Int("group.initial.rebalance.delay.ms"))
	c.MinSessionTimeoutMs = int32(cfg.Int("group.min.session.timeout.ms"))
	c.MaxSessionTimeoutMs = int32(cfg.Int("group.max.session.timeout.ms"))
	c.MaxSize = int32(cfg.Int("group.max.size"))
	c.ConsumerHeartbeatIntervalMs = int32(cfg.Int("group.consumer.heartbeat.interval.ms"))
	c.ConsumerSessionTimeoutMs = int32(cfg.Int("group.consumer.session.timeout.ms"))
	c.ConsumerAssignors = cfg.List("group.consumer.assignors")
	c.RebalanceProtocols = cfg.List("group.coordinator.rebalance.protocols")
	c.OffsetsRetentionMinutes = int32(cfg.Int("offsets.retention.minutes"))
	c.OffsetsRetentionCheckIntervalMs = cfg.Int("offsets.retention.check.interval.ms")
	c.OffsetMetadataMaxBytes = int32(cfg.Int("offset.metadata.max.bytes"))
	return c
}

// imageTopics lets the coordinator read topics from the current image.
type imageTopics struct{ b *Broker }

func topicInfo(t *metadata.Topic) group.TopicInfo {
	return group.TopicInfo{Name: t.Name, ID: t.ID, Partitions: int32(len(t.Partitions))}
}

func (it imageTopics) TopicByName(name string) (group.TopicInfo, bool) {
	t, ok := it.b.image.Load().Topics[name]
	if !ok {
		return group.TopicInfo{}, false
	}
	return topicInfo(t), true
}

func (it imageTopics) TopicByID(id [16]byte) (group.TopicInfo, bool) {
	t, ok := it.b.image.Load().TopicsByID[metadata.UUID(id)]
	if !ok {
		return group.TopicInfo{}, false
	}
	return topicInfo(t), true
}

func (it imageTopics) Topics() []group.TopicInfo {
	img := it.b.image.Load()
	out := make([]group.TopicInfo, 0, len(img.Topics))
	for _, name := range img.TopicNames() {
		out = append(out, topicInfo(img.Topics[name]))
	}
	return out
}

// offsetsPartition is a __consumer_offsets partition led here, as the
// coordinator's seam to storage.
type offsetsPartition struct{ p *replica.Partition }

func (o offsetsPartition) Append(ctx context.Context, batch []byte) error {
	res, err := o.p.AppendAsCoordinator(batch, -1)
	if err == nil && res.Pending {
		err = o.p.AwaitAcks(ctx, res.LastOffset+1, -1)
	}
	return storageError(err)
}

func (o offsetsPartition) ReadBatches(from int64, fn func(batch []byte) bool) error {
	return storageError(o.p.ReadForLoad(from, fn))
}

// applyCoordinator loads or unloads the coordinators' partitions as the
// leadership of __consumer_offsets and __transaction_state changes.
// b.imageMu must be held.
func (b *Broker) applyCoordinator(old, img *metadata.Image) {
	b.applyLeadership(old, img, OffsetsTopic,
		func(i int32, _ int32, r *replica.Partition) { b.groups.Load(i, offsetsPartition{r}) },
		b.groups.Unload)
	b.applyLeadership(old, img, TransactionStateTopic,
		func(i int32, epoch int32, r *replica.Partition) { b.txns.Load(i, epoch, offsetsPartition{r}) },
		b.txns.Unload)
}

// applyLeadership calls load for each partition of topic this broker
// starts leading (or leads at a new leader epoch) and unload for each it
// stops leading. b.imageMu must be held.
func (b *Broker) applyLeadership(old, img *metadata.Image, topic string, load func(partition, leaderEpoch int32, r *replica.Partition), unload func(int32)) {
	newT := img.Topics[topic]
	oldT := old.Topics[topic]
	if oldT != nil && (newT == nil || newT.ID != oldT.ID) {
		for i := range oldT.Partitions {
			if oldT.Partitions[i].Leader == b.nodeID {
				unload(int32(i))
			}
		}
		oldT = nil
	}
	if newT == nil {
		return
	}
	for i := range newT.Partitions {
		p := &newT.Partitions[i]
		var was *metadata.Partition
		if oldT != nil && i < len(oldT.Partitions) {
			was = &oldT.Partitions[i]
		}
		leads := p.Leader == b.nodeID
		led := was != nil && was.Leader == b.nodeID
		switch {
		case leads && (!led || was.LeaderEpoch != p.LeaderEpoch):
			r, ok := b.partition(topic, int32(i))
			if !ok {
				continue
			}
			load(int32(i), p.LeaderEpoch, r)
		case !leads && led:
			unload(int32(i))
		}
	}
}

// ensureOffsetsTopic creates __consumer_offsets on first use, compacted,
// with replication factor min(offsets.topic.replication.factor, live
// brokers), as Kafka does.
func (b *Broker) ensureOffsetsTopic() error {
	if _, ok := b.image.Load().Topics[OffsetsTopic]; ok {
		return nil
	}
	rf := int16(min(b.cfg.Int("offsets.topic.replication.factor"), int64(len(b.image.Load().BrokerIDs()))))
	compact := "compact"
	segment := b.cfg.String("offsets.topic.segment.bytes")
	ctx, cancel := context.WithTimeout(b.ctx, controllerRequestTimeout)
	defer cancel()
	res := b.createTopicsAtController(ctx, []controller.TopicSpec{{
		Name:              OffsetsTopic,
		NumPartitions:     int32(b.cfg.Int("offsets.topic.num.partitions")),
		ReplicationFactor: max(rf, 1),
		Configs:           map[string]*string{"cleanup.policy": &compact, "segment.bytes": &segment},
	}})[0]
	if res.Err != nil && !errors.Is(res.Err, kerr.TopicAlreadyExists) {
		return res.Err
	}
	if res.Err == nil {
		b.logger.Info("topic created", "topic", OffsetsTopic, "partitions", res.NumPartitions, "replication.factor", res.ReplicationFactor)
	}
	return nil
}

// groupClient identifies a request's connection as Kafka does in member
// metadata: the client id and "/" + the client's IP.
func groupClient(c *wire.Conn, req *wire.Request) group.Client {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return group.Client{ID: req.ClientID, Host: "/" + host}
}

// deferred runs a blocking coordinator call off the connection's reader.
func deferred(fn func() kmsg.Response) wire.Response {
	return wire.Response{Deferred: func() wire.Response { return respond(fn()) }}
}

func (b *Broker) handleJoinGroup(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.JoinGroupRequest)
	client := groupClient(c, req)
	return deferred(func() kmsg.Response { return b.groups.JoinGroup(ctx, client, r) })
}

func (b *Broker) handleSyncGroup(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.SyncGroupRequest)
	return deferred(func() kmsg.Response { return b.groups.SyncGroup(ctx, r) })
}

func (b *Broker) handleHeartbeat(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	return respond(b.groups.Heartbeat(req.Body.(*kmsg.HeartbeatRequest)))
}

func (b *Broker) handleLeaveGroup(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.LeaveGroupRequest)
	return deferred(func() kmsg.Response { return b.groups.LeaveGroup(ctx, r) })
}

func (b *Broker) handleOffsetCommit(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.OffsetCommitRequest)
	return deferred(func() kmsg.Response { return b.groups.OffsetCommit(ctx, r) })
}

func (b *Broker) handleOffsetFetch(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	return respond(b.groups.OffsetFetch(req.Body.(*kmsg.OffsetFetchRequest)))
}

func (b *Broker) handleOffsetDelete(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.OffsetDeleteRequest)
	return deferred(func() kmsg.Response { return b.groups.OffsetDelete(ctx, r) })
}

func (b *Broker) handleListGroups(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	return respond(b.groups.ListGroups(req.Body.(*kmsg.ListGroupsRequest)))
}

// handleDescribeGroups answers, when asked, every operation on the groups
// it describes, as Kafka does without an authorizer or for a super user
// (authorizeDescribeGroups answers the others); so does
// handleConsumerGroupDescribe.
func (b *Broker) handleDescribeGroups(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeGroupsRequest)
	resp := b.groups.DescribeGroups(r)
	for i := range resp.Groups {
		if g := &resp.Groups[i]; r.IncludeAuthorizedOperations && g.ErrorCode == 0 {
			g.AuthorizedOperations = operationBits(groupOperations, allowAll)
		}
	}
	return respond(resp)
}

func (b *Broker) handleDeleteGroups(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DeleteGroupsRequest)
	return deferred(func() kmsg.Response { return b.groups.DeleteGroups(ctx, r) })
}

func (b *Broker) handleConsumerGroupHeartbeat(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ConsumerGroupHeartbeatRequest)
	client := groupClient(c, req)
	return deferred(func() kmsg.Response { return b.groups.ConsumerGroupHeartbeat(ctx, client, r) })
}

func (b *Broker) handleConsumerGroupDescribe(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.ConsumerGroupDescribeRequest)
	resp := b.groups.ConsumerGroupDescribe(r)
	for i := range resp.Groups {
		if g := &resp.Groups[i]; r.IncludeAuthorizedOperations && g.ErrorCode == 0 {
			g.AuthorizedOperations = operationBits(groupOperations, allowAll)
		}
	}
	return respond(resp)
}

// coordinatorFor returns the broker coordinating partition p of an
// internal topic (__consumer_offsets or __transaction_state), or an error
// Kafka would answer FindCoordinator with.
func (b *Broker) coordinatorFor(topic string, p int32) (*metadata.Broker, error) {
	img := b.image.Load()
	_, part, ok := img.Partition(topic, p)
	if !ok || part.Leader < 0 {
		return nil, fmt.Errorf("%w: %s partition %d has no leader", kerr.CoordinatorNotAvailable, topic, p)
	}
	br, ok := img.Brokers[part.Leader]
	if !ok || br.Fenced || !slices.Contains(part.ISR, part.Leader) {
		return nil, fmt.Errorf("%w: the leader of %s partition %d is not available", kerr.CoordinatorNotAvailable, topic, p)
	}
	return br, nil
}

// offsetCommitErrors answers each partition req names with code.
func offsetCommitErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.OffsetCommitRequest), resp.(*kmsg.OffsetCommitResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
}

// offsetFetchErrors answers the request's group (v0-7: and each partition
// it names) or each of its groups (v8+) with code.
func offsetFetchErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.OffsetFetchRequest), resp.(*kmsg.OffsetFetchResponse)
	out.ErrorCode = code
	for _, t := range r.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.Offset = p, code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		out.Topics = append(out.Topics, rt)
	}
	for _, g := range r.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g.Group, code
		out.Groups = append(out.Groups, rg)
	}
}

// describeGroupsErrors answers each group req names with code.
func describeGroupsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DescribeGroupsResponse)
	for _, g := range req.(*kmsg.DescribeGroupsRequest).Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, code
		out.Groups = append(out.Groups, rg)
	}
}

// deleteGroupsErrors answers each group req names with code.
func deleteGroupsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DeleteGroupsResponse)
	for _, g := range req.(*kmsg.DeleteGroupsRequest).Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, code
		out.Groups = append(out.Groups, rg)
	}
}

// consumerGroupDescribeErrors answers each group req names with code.
func consumerGroupDescribeErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.ConsumerGroupDescribeResponse)
	for _, g := range req.(*kmsg.ConsumerGroupDescribeRequest).Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group, rg.ErrorCode = g, code
		out.Groups = append(out.Groups, rg)
	}
}
