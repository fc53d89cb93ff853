package broker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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
// leader (or, not knowing one, each voter in turn). An answer with
// NOT_CONTROLLER anywhere in it (notController) or a failed exchange is
// retried at another voter, with a short backoff, until the request's
// context ends; the last answer (or error) is returned then.
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

// target returns the voter to send to now: the quorum's leader as this
// node knows it, else the next voter in turn, leaving out those that
// refused the request already (answered NOT_CONTROLLER or could not be
// reached): after a change of leader, this node's view of the quorum may
// name the old one until it catches up, and the request must not wait
// for that. local is set when that is this node's own active controller.
func (cc *controllerClient) target(refused map[int32]bool) (id int32, local bool) {
	if c := cc.b.controller; c != nil {
		leader, active := c.Leader()
		if active {
			return cc.b.nodeID, true
		}
		if leader >= 0 && leader != cc.b.nodeID && !refused[leader] {
			return leader, false
		}
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, skipRefused := range []bool{true, false} {
		for range cc.voters {
			v := cc.voters[cc.next%len(cc.voters)]
			cc.next++
			if (v.ID != cc.b.nodeID || cc.b.controller == nil) && !(skipRefused && refused[v.ID]) {
				return v.ID, false
			}
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

// Request sends req (at the version set on it) to the active controller,
// trying the voters in turn (see target) until one answers as the active
// controller or ctx ends.
func (cc *controllerClient) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	backoff := 20 * time.Millisecond
	var last kmsg.Response
	var lastErr error
	refused := map[int32]bool{}
	for {
		if len(refused) >= len(cc.voters) {
			clear(refused) // every voter refused: ask them all again
		}
		id, local := cc.target(refused)
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
		if err == nil && !notController(req, resp) {
			return resp, nil
		}
		if !local {
			refused[id] = true
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

// notController reports whether a controller's answer to req says it is
// not the active controller (anywhere in it: a voter that lost the
// leadership while it answered may have done part of the request, which
// is idempotent for every controller API), so the request should go
// elsewhere.
func notController(req kmsg.Request, resp kmsg.Response) bool {
	if carriesCode(resp, kerr.NotController.Code) {
		return true
	}
	a := controllerAPIs[req.Key()]
	return a != nil && a.staleCode != 0 && carriesCode(resp, a.staleCode)
}

// carriesCode reports whether any field named ErrorCode in resp, at the
// top or in any entry, holds code. It reads the kmsg struct by reflection,
// so that no API needs a list of where its answer keeps errors; it runs
// only for answers from the controller.
func carriesCode(resp kmsg.Response, code int16) bool {
	return hasErrorCode(reflect.ValueOf(resp), code)
}

func hasErrorCode(v reflect.Value, code int16) bool {
	switch v.Kind() {
	case reflect.Pointer:
		return !v.IsNil() && hasErrorCode(v.Elem(), code)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 && int16(f.Int()) == code {
				return true
			}
			if (f.Kind() == reflect.Slice || f.Kind() == reflect.Struct) && hasErrorCode(f, code) {
				return true
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return false // bytes, strings, ids
		}
		for i := 0; i < v.Len(); i++ {
			if hasErrorCode(v.Index(i), code) {
				return true
			}
		}
	}
	return false
}

// forwardToController answers a client's admin request by sending it to
// the active controller, at the client's version, and relaying the answer;
// when no controller answered in time, every part of the request is
// answered NOT_CONTROLLER (the API's api.errors), which clients retry.
// The wait is deferred, so the connection goes on reading.
func (b *Broker) forwardToController(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	body := req.Body
	a := apis[req.Key]
	return wire.Response{Deferred: func() wire.Response {
		ctx, cancel := context.WithTimeout(ctx, forwardTimeout(body, time.Duration(b.cfg.Int("request.timeout.ms"))*time.Millisecond))
		defer cancel()
		resp, err := b.ctrl.Request(ctx, body)
		if err != nil {
			b.logger.Warn("forwarding to the controller", "api", kmsg.NameForKey(body.Key()), "err", err)
			return respond(errorAnswer(a, body, kerr.NotController.Code))
		}
		if a.afterForward != nil {
			a.afterForward(b, ctx, body, resp)
		}
		return respond(resp)
	}}
}

// forwardTimeout is how long a forwarded request waits for the active
// controller: the request's own timeout, or otherwise (request.timeout.ms,
// as Kafka's forwarding manager waits).
func forwardTimeout(req kmsg.Request, otherwise time.Duration) time.Duration {
	if r, ok := req.(kmsg.TimeoutRequest); ok && r.Timeout() > 0 {
		return time.Duration(r.Timeout()) * time.Millisecond
	}
	return otherwise
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
