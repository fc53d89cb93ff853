package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/config"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// controllerClient sends requests to the active controller: in-process to
// this node's controller APIs when this node is the active controller,
// otherwise over the controller listener of the voter the quorum names as
// leader (or, not knowing one, each voter in turn). A NOT_CONTROLLER answer
// or a failed exchange is retried, with a short backoff, until the
// request's context ends; the last answer (or error) is returned then.
type controllerClient struct {
	b       *Broker
	voters  []config.Voter
	timeout time.Duration // controller.quorum.request.timeout.ms, per exchange

	mu      sync.Mutex
	clients map[int32]*wire.Client
	next    int // the voter to try when no leader is known
}

func newControllerClient(b *Broker, voters []config.Voter, timeout time.Duration) *controllerClient {
	return &controllerClient{b: b, voters: voters, timeout: timeout, clients: map[int32]*wire.Client{}}
}

func (cc *controllerClient) close() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, c := range cc.clients {
		c.Close()
	}
}

// target returns the voter to send to now: the quorum's leader when known,
// else the next voter in turn. local is set when that is this node's own
// active controller.
func (cc *controllerClient) target() (id int32, local bool) {
	if c := cc.b.controller; c != nil {
		leader, active := c.Leader()
		if active {
			return cc.b.nodeID, true
		}
		if leader >= 0 && leader != cc.b.nodeID {
			return leader, false
		}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for range cc.voters {
		v := cc.voters[cc.next%len(cc.voters)]
		cc.next++
		if v.ID != cc.b.nodeID || cc.b.controller == nil {
			return v.ID, false
		}
	}
	return cc.b.nodeID, true
}

func (cc *controllerClient) client(id int32) *wire.Client {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c, ok := cc.clients[id]; ok {
		return c
	}
	for _, v := range cc.voters {
		if v.ID == id {
			c := wire.NewClient(v.Addr(), "strata-broker-"+itoa(cc.b.nodeID))
			c.Dial = cc.b.dialController
			cc.clients[id] = c
			return c
		}
	}
	return nil
}

// Request sends req (at the version set on it) to the active controller.
func (cc *controllerClient) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	backoff := 20 * time.Millisecond
	var last kmsg.Response
	var lastErr error
	for {
		id, local := cc.target()
		var resp kmsg.Response
		var err error
		if local {
			resp, err = cc.b.handleControllerLocally(ctx, req)
		} else if c := cc.client(id); c != nil {
			ectx, cancel := context.WithTimeout(ctx, cc.timeout)
			resp, err = c.Request(ectx, req)
			cancel()
		} else {
			err = fmt.Errorf("broker: the quorum names node %d, which is not among controller.quorum.voters", id)
		}
		if err == nil && !notController(resp) {
			return resp, nil
		}
		if err == nil {
			last, lastErr = resp, nil
		} else if last == nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return last, nil
			}
			return nil, errors.Join(fmt.Errorf("broker: no active controller answered: %w", context.Cause(ctx)), lastErr)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// handleControllerLocally answers a request with this node's controller
// APIs, as the controller listener would.
func (b *Broker) handleControllerLocally(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	a, ok := controllerAPIs[req.Key()]
	if !ok {
		return nil, fmt.Errorf("broker: %s is not a controller API", kmsg.NameForKey(req.Key()))
	}
	wr := &wire.Request{Key: req.Key(), Version: req.GetVersion(), Body: req, Received: time.Now()}
	res := a.handle(b, ctx, nil, wr)
	if res.Deferred != nil {
		res = res.Deferred()
	}
	if res.Body == nil {
		return nil, fmt.Errorf("broker: %s got no answer", kmsg.NameForKey(req.Key()))
	}
	res.Body.SetVersion(req.GetVersion())
	return res.Body, nil
}

// notController reports whether a controller's answer says it is not the
// active controller (anywhere in it), so the request should go elsewhere.
func notController(resp kmsg.Response) bool {
	nc := kerr.NotController.Code
	switch r := resp.(type) {
	case *kmsg.BrokerRegistrationResponse:
		return r.ErrorCode == nc
	case *kmsg.BrokerHeartbeatResponse:
		return r.ErrorCode == nc
	case *kmsg.AllocateProducerIDsResponse:
		return r.ErrorCode == nc
	case *kmsg.AlterPartitionResponse:
		if r.ErrorCode == nc {
			return true
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == nc {
					return true
				}
			}
		}
	case *kmsg.CreateTopicsResponse:
		for _, t := range r.Topics {
			if t.ErrorCode == nc {
				return true
			}
		}
	case *kmsg.DeleteTopicsResponse:
		for _, t := range r.Topics {
			if t.ErrorCode == nc {
				return true
			}
		}
	case *kmsg.CreatePartitionsResponse:
		for _, t := range r.Topics {
			if t.ErrorCode == nc {
				return true
			}
		}
	case *kmsg.AlterConfigsResponse:
		for _, t := range r.Resources {
			if t.ErrorCode == nc {
				return true
			}
		}
	case *kmsg.IncrementalAlterConfigsResponse:
		for _, t := range r.Resources {
			if t.ErrorCode == nc {
				return true
			}
		}
	case *kmsg.AlterPartitionAssignmentsResponse:
		if r.ErrorCode == nc {
			return true
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == nc {
					return true
				}
			}
		}
	case *kmsg.ListPartitionReassignmentsResponse:
		return r.ErrorCode == nc
	case *kmsg.DescribeQuorumResponse:
		if r.ErrorCode == nc {
			return true
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode == kerr.NotLeaderForPartition.Code {
					return true
				}
			}
		}
	}
	return false
}

// forwardToController answers a client's admin request by sending it to
// the active controller, at the client's version, and relaying the answer.
// The wait is deferred, so the connection goes on reading.
func (b *Broker) forwardToController(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	body := req.Body
	return wire.Response{Deferred: func() wire.Response {
		ctx, cancel := context.WithTimeout(ctx, requestTimeout(body))
		defer cancel()
		resp, err := b.ctrl.Request(ctx, body)
		if err != nil {
			b.logger.Warn("forwarding to the controller", "api", kmsg.NameForKey(body.Key()), "err", err)
			resp = notControllerResponse(body)
		}
		b.afterController(ctx, body, resp)
		return respond(resp)
	}}
}

// requestTimeout is a request's own timeout, or controllerRequestTimeout.
func requestTimeout(req kmsg.Request) time.Duration {
	var ms int32
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		ms = r.TimeoutMillis
	case *kmsg.DeleteTopicsRequest:
		ms = r.TimeoutMillis
	case *kmsg.CreatePartitionsRequest:
		ms = r.TimeoutMillis
	case *kmsg.AlterPartitionAssignmentsRequest:
		ms = r.TimeoutMillis
	case *kmsg.ListPartitionReassignmentsRequest:
		ms = r.TimeoutMillis
	}
	if ms <= 0 {
		return controllerRequestTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// notControllerResponse answers a forwarded request NOT_CONTROLLER
// everywhere, when no controller could be reached: clients retry it.
func notControllerResponse(req kmsg.Request) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	nc := kerr.NotController.Code
	msg := func() *string { s := "no active controller could be reached"; return &s }
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		out := resp.(*kmsg.CreateTopicsResponse)
		for _, t := range r.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode, st.ErrorMessage = t.Topic, nc, msg()
			out.Topics = append(out.Topics, st)
		}
	case *kmsg.DeleteTopicsRequest:
		out := resp.(*kmsg.DeleteTopicsResponse)
		for _, name := range r.TopicNames {
			st := kmsg.NewDeleteTopicsResponseTopic()
			n := name
			st.Topic, st.ErrorCode = &n, nc
			out.Topics = append(out.Topics, st)
		}
		for _, t := range r.Topics {
			st := kmsg.NewDeleteTopicsResponseTopic()
			st.Topic, st.TopicID, st.ErrorCode = t.Topic, t.TopicID, nc
			out.Topics = append(out.Topics, st)
		}
	case *kmsg.CreatePartitionsRequest:
		out := resp.(*kmsg.CreatePartitionsResponse)
		for _, t := range r.Topics {
			st := kmsg.NewCreatePartitionsResponseTopic()
			st.Topic, st.ErrorCode, st.ErrorMessage = t.Topic, nc, msg()
			out.Topics = append(out.Topics, st)
		}
	case *kmsg.AlterConfigsRequest:
		out := resp.(*kmsg.AlterConfigsResponse)
		for _, res := range r.Resources {
			sr := kmsg.NewAlterConfigsResponseResource()
			sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = res.ResourceType, res.ResourceName, nc, msg()
			out.Resources = append(out.Resources, sr)
		}
	case *kmsg.IncrementalAlterConfigsRequest:
		out := resp.(*kmsg.IncrementalAlterConfigsResponse)
		for _, res := range r.Resources {
			sr := kmsg.NewIncrementalAlterConfigsResponseResource()
			sr.ResourceType, sr.ResourceName, sr.ErrorCode, sr.ErrorMessage = res.ResourceType, res.ResourceName, nc, msg()
			out.Resources = append(out.Resources, sr)
		}
	case *kmsg.DescribeQuorumRequest:
		out := resp.(*kmsg.DescribeQuorumResponse)
		out.ErrorCode, out.ErrorMessage = nc, msg()
	case *kmsg.AlterPartitionAssignmentsRequest:
		out := resp.(*kmsg.AlterPartitionAssignmentsResponse)
		out.ErrorCode, out.ErrorMessage = nc, msg()
	case *kmsg.ListPartitionReassignmentsRequest:
		out := resp.(*kmsg.ListPartitionReassignmentsResponse)
		out.ErrorCode, out.ErrorMessage = nc, msg()
	}
	return resp
}

// afterController does a broker's part of an admin request the controller
// answered: deleting the committed offsets of deleted topics, for the
// groups this broker coordinates, before the answer (a topic created again
// with the same name starts with none). Every broker also drops them when
// it applies the image without the topic.
func (b *Broker) afterController(ctx context.Context, req kmsg.Request, resp kmsg.Response) {
	switch r := resp.(type) {
	case *kmsg.CreateTopicsResponse:
		// Answer once this node's own image has the new topics, so that
		// the client's next request here (Metadata, Produce) finds them.
		// Kafka answers when the controller has committed, and a client
		// that produces at once through the broker it asked can get
		// UNKNOWN_TOPIC_OR_PARTITION (kafka-go's writer gives up on it).
		// A node that does not catch up within the request's timeout
		// answers anyway: the topics exist.
		if cr, ok := req.(*kmsg.CreateTopicsRequest); !ok || cr.ValidateOnly {
			return
		}
		b.awaitImage(ctx, func(img *metadata.Image) bool {
			for _, t := range r.Topics {
				if t.ErrorCode == 0 && img.Topics[t.Topic] == nil {
					return false
				}
			}
			return true
		})
	case *kmsg.DeleteTopicsResponse:
		var deleted []string
		for _, t := range r.Topics {
			if t.ErrorCode == 0 && t.Topic != nil {
				deleted = append(deleted, *t.Topic)
			}
		}
		if len(deleted) == 0 {
			return
		}
		b.groups.DeleteTopicOffsets(ctx, deleted)
		// Likewise, once this node no longer has them.
		b.awaitImage(ctx, func(img *metadata.Image) bool {
			for _, name := range deleted {
				if img.Topics[name] != nil {
					return false
				}
			}
			return true
		})
	}
}

// createTopicsAtController creates topics the broker needs
// (__consumer_offsets, topics auto-created by Metadata) through the active
// controller, as a CreateTopics request.
func (b *Broker) createTopicsAtController(ctx context.Context, specs []controller.TopicSpec) []controller.TopicResult {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = controllerAPIs[req.Key()].max
	req.TimeoutMillis = int32(controllerRequestTimeout / time.Millisecond)
	for _, s := range specs {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic, t.NumPartitions, t.ReplicationFactor = s.Name, s.NumPartitions, s.ReplicationFactor
		for k, v := range s.Configs {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name, c.Value = k, v
			t.Configs = append(t.Configs, c)
		}
		req.Topics = append(req.Topics, t)
	}
	results := make([]controller.TopicResult, len(specs))
	resp, err := b.ctrl.Request(ctx, req)
	if err != nil {
		for i := range results {
			results[i].Err = fmt.Errorf("%w: %v", kerr.NotController, err)
		}
		return results
	}
	r := resp.(*kmsg.CreateTopicsResponse)
	for i := range results {
		if i >= len(r.Topics) {
			results[i].Err = fmt.Errorf("%w: no answer for topic %s", kerr.UnknownServerError, specs[i].Name)
			continue
		}
		t := r.Topics[i]
		results[i] = controller.TopicResult{ID: t.TopicID, NumPartitions: t.NumPartitions, ReplicationFactor: t.ReplicationFactor}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			msg := ""
			if t.ErrorMessage != nil {
				msg = *t.ErrorMessage
			}
			results[i].Err = fmt.Errorf("%w: %s", err, msg)
		}
	}
	return results
}

// controllerID is what Metadata and DescribeCluster report as the
// controller: the quorum's leader when it is a live broker (admin clients
// send it their requests), else some live broker, which forwards them, as
// Kafka's KRaft brokers answer.
func (b *Broker) controllerID(img *metadata.Image) int32 {
	if b.controller != nil {
		if leader, _ := b.controller.Leader(); leader >= 0 {
			if br, ok := img.Brokers[leader]; ok && !br.Fenced {
				return leader
			}
		}
	}
	if br, ok := img.Brokers[b.nodeID]; ok && !br.Fenced {
		return b.nodeID
	}
	if ids := img.BrokerIDs(); len(ids) > 0 {
		return ids[0]
	}
	return -1
}
