package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// DescribeCluster: v0-1.
//
// Behavior: the registered brokers, the cluster id and the controller (this
// node, on a single node). Endpoint type 2 (controllers) is answered like
// brokers, as every Strata node is both; other types are
// UNSUPPORTED_ENDPOINT_TYPE. Asked for them, the cluster's authorized
// operations are Kafka's bit field (1<<operation): all of the cluster's
// without authorization or for a super user, else what the principal's
// ACLs allow, none without DESCRIBE (authorizeDescribeCluster).
func init() {
	register(api{key: kmsg.DescribeCluster, min: 0, max: 1, handle: (*Broker).handleDescribeCluster,
		authorize: authorizeDescribeCluster, quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeClusterResponse).ErrorCode = code
		}})
}

func (b *Broker) handleDescribeCluster(_ context.Context, conn *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeClusterRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClusterResponse)
	if r.Version >= 1 && r.EndpointType != 1 && r.EndpointType != 2 {
		err := fmt.Errorf("%w: endpoint type %d", kerr.UnsupportedEndpointType, r.EndpointType)
		resp.ErrorCode, resp.ErrorMessage = errorCode(err), errorMessage(err)
		return respond(resp)
	}
	resp.EndpointType = r.EndpointType
	if r.IncludeClusterAuthorizedOperations {
		// Every operation: without authorization, or for a super user
		// (authorizeDescribeCluster answers the others).
		resp.ClusterAuthorizedOperations = operationBits(clusterOperations, allowAll)
	}
	img := b.image.Load()
	resp.ClusterID = img.ClusterID
	resp.ControllerID = b.controllerID(img)
	for _, id := range img.BrokerIDs() {
		br := img.Brokers[id]
		rb := kmsg.NewDescribeClusterResponseBroker()
		ep := br.Endpoint(b.clientListenerName(conn))
		rb.NodeID, rb.Host, rb.Port = br.NodeID, ep.Host, ep.Port
		if br.Rack != "" {
			rack := br.Rack
			rb.Rack = &rack
		}
		resp.Brokers = append(resp.Brokers, rb)
	}
	return respond(resp)
}
