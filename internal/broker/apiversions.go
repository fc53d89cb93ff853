package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// ApiVersions: v0-4.
//
// Advertises exactly the APIs registered in this package. wire answers
// versions above 4 with UNSUPPORTED_VERSION and this table, so the client
// retries at v4 (KIP-511). No finalized features are reported: Strata has
// no feature flags.
func init() { register(18, 0, 4, (*Broker).handleApiVersions) }

func (b *Broker) handleApiVersions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	resp := req.Body.(*kmsg.ApiVersionsRequest).ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = wire.ApiVersionsKeys(b.versions)
	return respond(resp)
}
