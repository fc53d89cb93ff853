package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// FindCoordinator: v0-6.
//
// Behavior:
// * A group's coordinator is the leader of the __consumer_offsets
// partition its id hashes to; the topic is created on first use.
// * v4+ batches keys; earlier versions answer one key at the top level.
// * A transactional id's coordinator (key type 1) is the leader of the
// __transaction_state partition it hashes to; the topic is created on
// first use. Share groups (key type 2) are INVALID_REQUEST.
func init() {
	register(api{key: kmsg.FindCoordinator, min: 0, max: 6, handle: (*Broker).handleFindCoordinator,
		authorize: authorizeFindCoordinator, errors: findCoordinatorErrors, quota: requestTime})
}

func (b *Broker) handleFindCoordinator(_ context.Context, conn *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.FindCoordinatorRequest)
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		c.NodeID, c.Port = -1, -1
		err := b.findCoordinator(r.CoordinatorType, key, &c)
		if err == nil {
			// The coordinator's endpoint on the listener the client uses.
			if br := b.image.Load().Brokers[c.NodeID]; br != nil {
				ep := br.Endpoint(b.clientListenerName(conn))
				c.Host, c.Port = ep.Host, ep.Port
			}
		}
		if err != nil {
			c.ErrorCode = errorCode(err)
			c.ErrorMessage = errorMessage(err)
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if r.Version < 4 {
		c := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.ErrorMessage = c.ErrorCode, c.ErrorMessage
		resp.NodeID, resp.Host, resp.Port = c.NodeID, c.Host, c.Port
	}
	return respond(resp)
}

func (b *Broker) findCoordinator(keyType int8, key string, c *kmsg.FindCoordinatorResponseCoordinator) error {
	switch keyType {
	case 0:
	case 1:
		return b.findTxnCoordinator(key, c)
	default:
		return fmt.Errorf("%w: coordinator type %d", kerr.InvalidRequest, keyType)
	}
	if key == "" {
		return fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	if err := b.ensureOffsetsTopic(); err != nil {
		return fmt.Errorf("%w: creating __consumer_offsets: %v", kerr.CoordinatorNotAvailable, err)
	}
	br, err := b.coordinatorFor(OffsetsTopic, b.groups.HashPartition(key))
	if err != nil {
		return err
	}
	c.NodeID, c.Host, c.Port = br.NodeID, br.Host, br.Port
	return nil
}

// findCoordinatorErrors answers the key (v0-3) or each key (v4+) req
// names with code.
func findCoordinatorErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.FindCoordinatorResponse)
	out.ErrorCode, out.NodeID, out.Port = code, -1, -1
	for _, k := range req.(*kmsg.FindCoordinatorRequest).CoordinatorKeys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key, co.NodeID, co.Port, co.ErrorCode = k, -1, -1, code
		out.Coordinators = append(out.Coordinators, co)
	}
}
