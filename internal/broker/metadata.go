package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// Metadata: v0-12.
//
// Behavior:
// * An unknown topic is created when auto.create.topics.enable is on and
// the request allows it (always before v4). The answer is Kafka's (KRaft
// mode, AutoTopicCreationManager.sendCreateTopicRequest):
// UNKNOWN_TOPIC_OR_PARTITION with no partitions, and the client asks again.
// Kafka creates the topic in the background; Strata creates it before
// answering, so the next request finds it with its partitions. (Kafka with
// ZooKeeper answered LEADER_NOT_AVAILABLE; clients retry on either.)
// * Internal topics (__consumer_offsets) are never auto-created here;
// FindCoordinator creates them, as in Kafka.
// * Topics may be named by id (v10+); an unknown id is UNKNOWN_TOPIC_ID.
// * Authorized operations are not computed (no ACLs): the fields keep
// Kafka's "not requested" value.
func init() {
	register(api{key: kmsg.Metadata, min: 0, max: 12, handle: (*Broker).handleMetadata,
		authorize: authorizeMetadata, errors: metadataErrors, quota: requestTime})
}

// OffsetsTopic is the internal topic of committed offsets.
const OffsetsTopic = "__consumer_offsets"

// TransactionStateTopic is the internal topic of the transaction
// coordinator's state.
const TransactionStateTopic = "__transaction_state"

func isInternalTopic(name string) bool { return name == OffsetsTopic || name == TransactionStateTopic }

// allAuthorizedOperations answers, when asked, every operation on the
// cluster and the topics, as Kafka does without an authorizer or for a
// super user (authorizeMetadata answers the others).
func allAuthorizedOperations(r *kmsg.MetadataRequest, resp *kmsg.MetadataResponse) *kmsg.MetadataResponse {
	if r.IncludeClusterAuthorizedOperations && r.Version >= 8 && r.Version <= 10 {
		resp.AuthorizedOperations = operationBits(clusterOperations, allowAll)
	}
	if r.IncludeTopicAuthorizedOperations {
		for i := range resp.Topics {
			resp.Topics[i].AuthorizedOperations = operationBits(topicOperations, allowAll)
		}
	}
	return resp
}

func (b *Broker) handleMetadata(_ context.Context, conn *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.MetadataRequest)
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	img := b.image.Load()

	allTopics := r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0)
	autoCreate := (r.Version < 4 || r.AllowAutoTopicCreation) && b.cfg.Bool("auto.create.topics.enable")
	// autoCreated are the topics this request asked to create: whether the
	// creation succeeded or not, they are answered as unknown this time.
	autoCreated := map[string]bool{}
	if !allTopics {
		var create []string
		for _, rt := range r.Topics {
			if rt.Topic != nil && !autoCreated[*rt.Topic] {
				if _, ok := img.Topics[*rt.Topic]; !ok && autoCreate && !isInternalTopic(*rt.Topic) && controller.ValidateTopicName(*rt.Topic) == nil {
					create = append(create, *rt.Topic)
					autoCreated[*rt.Topic] = true
				}
			}
		}
		if len(create) > 0 {
			b.autoCreateTopics(create)
		}
	}

	for _, id := range img.BrokerIDs() {
		br := img.Brokers[id]
		mb := kmsg.NewMetadataResponseBroker()
		ep := br.Endpoint(b.clientListenerName(conn))
		mb.NodeID, mb.Host, mb.Port = br.NodeID, ep.Host, ep.Port
		if br.Rack != "" {
			rack := br.Rack
			mb.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, mb)
	}
	clusterID := img.ClusterID
	resp.ClusterID = &clusterID
	resp.ControllerID = b.controllerID(img)

	if allTopics {
		for _, name := range img.TopicNames() {
			resp.Topics = append(resp.Topics, b.metadataTopic(img, img.Topics[name]))
		}
		return respond(allAuthorizedOperations(r, resp))
	}
	for _, rt := range r.Topics {
		var t *metadata.Topic
		var err error
		switch {
		case rt.Topic != nil && autoCreated[*rt.Topic]:
			err = kerr.UnknownTopicOrPartition
		case rt.Topic != nil:
			t = img.Topics[*rt.Topic]
			if t == nil {
				err = kerr.UnknownTopicOrPartition
				if controller.ValidateTopicName(*rt.Topic) != nil {
					err = kerr.InvalidTopicException
				}
			}
		case rt.TopicID != [16]byte{}:
			t = img.TopicsByID[metadata.UUID(rt.TopicID)]
			if t == nil {
				err = kerr.UnknownTopicID
			}
		default:
			err = kerr.InvalidRequest
		}
		if err != nil {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID, mt.ErrorCode = rt.Topic, rt.TopicID, errorCode(err)
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		resp.Topics = append(resp.Topics, b.metadataTopic(img, t))
	}
	return respond(allAuthorizedOperations(r, resp))
}

func (b *Broker) metadataTopic(img *metadata.Image, t *metadata.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.Name
	mt.Topic = &name
	mt.TopicID = t.ID
	mt.IsInternal = isInternalTopic(t.Name)
	for i := range t.Partitions {
		p := &t.Partitions[i]
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(i)
		mp.Leader = p.Leader
		mp.LeaderEpoch = p.LeaderEpoch
		mp.Replicas = p.Replicas
		mp.ISR = p.ISR
		for _, r := range p.Replicas {
			if br, ok := img.Brokers[r]; !ok || br.Fenced {
				mp.OfflineReplicas = append(mp.OfflineReplicas, r)
			}
		}
		if p.Leader < 0 {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// autoCreateTopics creates topics with the default partition count and
// replication factor. A topic another request created meanwhile is fine.
func (b *Broker) autoCreateTopics(names []string) {
	specs := make([]controller.TopicSpec, len(names))
	for i, n := range names {
		specs[i] = controller.TopicSpec{Name: n, NumPartitions: -1, ReplicationFactor: -1}
	}
	ctx, cancel := context.WithTimeout(b.ctx, controllerRequestTimeout)
	defer cancel()
	for i, res := range b.createTopicsAtController(ctx, specs) {
		switch {
		case res.Err == nil:
			b.logger.Info("topic created", "topic", names[i], "partitions", res.NumPartitions, "replication.factor", res.ReplicationFactor, "auto", true)
		case errors.Is(res.Err, kerr.TopicAlreadyExists):
		default:
			b.logger.Warn("auto-creating topic failed", "topic", names[i], "err", fmt.Sprint(res.Err))
		}
	}
}

// metadataErrors answers each topic req names, by name or by id, with
// code.
func metadataErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.MetadataResponse)
	for _, rt := range req.(*kmsg.MetadataRequest).Topics {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic, t.TopicID, t.ErrorCode = rt.Topic, rt.TopicID, code
		out.Topics = append(out.Topics, t)
	}
}
