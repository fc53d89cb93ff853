package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// CreateTopics: v2-7.
//
// Behavior:
// * Each topic succeeds or fails on its own, with Kafka's codes
// (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
// INVALID_CONFIG, INVALID_TOPIC_EXCEPTION, INVALID_REPLICA_ASSIGNMENT) and
// a message. A topic named more than once in one request gets one
// result, INVALID_REQUEST, as in Kafka's ControllerApis.createTopics (it
// answers each duplicated name once, "Duplicate topic name.").
// * validate_only checks everything and creates nothing.
// * v5+ returns the topic's effective configuration.
// * The topic exists on this node when the response is sent.
func init() {
	register(api{key: kmsg.CreateTopics, min: 2, max: 7, handle: (*Broker).handleCreateTopics, forwarded: true,
		authorize: authorizeCreateTopics, errors: createTopicsErrors, afterForward: (*Broker).afterCreateTopics,
		quota: requestTime})
}

func (b *Broker) handleCreateTopics(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.CreateTopicsRequest)
	resp := r.ResponseKind().(*kmsg.CreateTopicsResponse)
	count := map[string]int{}
	for _, t := range r.Topics {
		count[t.Topic]++
	}
	var specs []controller.TopicSpec
	var index []int // response index of each spec
	for _, t := range r.Topics {
		if count[t.Topic] < 0 {
			continue // a duplicate already answered
		}
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = t.Topic
		st.NumPartitions, st.ReplicationFactor = -1, -1
		resp.Topics = append(resp.Topics, st)
		if count[t.Topic] > 1 {
			count[t.Topic] = -1
			st := &resp.Topics[len(resp.Topics)-1]
			st.ErrorCode = kerr.InvalidRequest.Code
			st.ErrorMessage = errorMessage(fmt.Errorf("duplicate topic name %q", t.Topic))
			continue
		}
		spec := controller.TopicSpec{Name: t.Topic, NumPartitions: t.NumPartitions, ReplicationFactor: t.ReplicationFactor, Configs: map[string]*string{}}
		if len(t.ReplicaAssignment) > 0 {
			assign := slices.Clone(t.ReplicaAssignment)
			slices.SortFunc(assign, func(a, b kmsg.CreateTopicsRequestTopicReplicaAssignment) int { return int(a.Partition - b.Partition) })
			for i, a := range assign {
				if a.Partition != int32(i) {
					spec.Assignment = nil
					spec.NumPartitions = 0 // rejected by the controller as INVALID_PARTITIONS
					break
				}
				spec.Assignment = append(spec.Assignment, a.Replicas)
			}
		}
		for _, c := range t.Configs {
			spec.Configs[c.Name] = c.Value
		}
		specs = append(specs, spec)
		index = append(index, len(resp.Topics)-1)
	}
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		b.createTopics(ctx, r, resp, specs, index)
		return resp
	})
}

// createTopics asks the controller for the topics and fills the response.
func (b *Broker) createTopics(ctx context.Context, r *kmsg.CreateTopicsRequest, resp *kmsg.CreateTopicsResponse, specs []controller.TopicSpec, index []int) {
	results := b.controller.CreateTopics(ctx, specs, r.ValidateOnly)
	img := b.image.Load()
	for i, res := range results {
		st := &resp.Topics[index[i]]
		if res.Err != nil {
			st.ErrorCode = errorCode(res.Err)
			st.ErrorMessage = errorMessage(res.Err)
			continue
		}
		st.TopicID = res.ID
		st.NumPartitions, st.ReplicationFactor = res.NumPartitions, res.ReplicationFactor
		if !r.ValidateOnly {
			b.logger.Info("topic created", "topic", st.Topic, "id", res.ID, "partitions", res.NumPartitions, "replication.factor", res.ReplicationFactor)
		}
		if r.Version >= 5 {
			values := b.topicConfig(img, st.Topic)
			overrides := img.TopicConfig(st.Topic)
			if r.ValidateOnly {
				overrides = map[string]string{}
				for k, v := range specs[i].Configs {
					if v != nil {
						values[k], overrides[k] = *v, *v
					}
				}
			}
			for _, k := range config.TopicKeys {
				c := kmsg.NewCreateTopicsResponseTopicConfig()
				v := values[k.Name]
				c.Name, c.Value = k.Name, &v
				c.Source = int8(kmsg.ConfigSourceDefaultConfig)
				if _, ok := overrides[k.Name]; ok {
					c.Source = int8(kmsg.ConfigSourceDynamicTopicConfig)
				}
				st.Configs = append(st.Configs, c)
			}
		}
	}
}

// deferController answers a request that waits for the controller: the
// response is deferred (the connection goes on reading) and fn runs with
// the request's timeout (timeoutMillis <= 0: controllerRequestTimeout).
func (b *Broker) deferController(ctx context.Context, timeoutMillis int32, fn func(ctx context.Context) kmsg.Response) wire.Response {
	timeout := time.Duration(timeoutMillis) * time.Millisecond
	if timeout <= 0 {
		timeout = controllerRequestTimeout
	}
	return wire.Response{Deferred: func() wire.Response {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return respond(fn(ctx))
	}}
}

// createTopicsErrors answers each topic req names with code.
func createTopicsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.CreateTopicsResponse)
	for _, t := range req.(*kmsg.CreateTopicsRequest).Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic, st.ErrorCode, st.NumPartitions, st.ReplicationFactor = t.Topic, code, -1, -1
		out.Topics = append(out.Topics, st)
	}
}

// afterCreateTopics answers once this node's own image has the new
// topics, so that the client's next request here (Metadata, Produce)
// finds them. Kafka answers when the controller has committed, and a
// client that produces at once through the broker it asked can get
// UNKNOWN_TOPIC_OR_PARTITION (kafka-go's writer gives up on it). A node
// that does not catch up within the request's timeout answers anyway: the
// topics exist.
func (b *Broker) afterCreateTopics(ctx context.Context, req kmsg.Request, resp kmsg.Response) {
	if req.(*kmsg.CreateTopicsRequest).ValidateOnly {
		return
	}
	r := resp.(*kmsg.CreateTopicsResponse)
	b.awaitImage(ctx, func(img *metadata.Image) bool {
		for _, t := range r.Topics {
			if t.ErrorCode == 0 && img.Topics[t.Topic] == nil {
				return false
			}
		}
		return true
	})
}
