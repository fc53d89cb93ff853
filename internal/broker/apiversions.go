package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// ApiVersions: v0-4.
//
// Advertises exactly the APIs registered in this package. wire answers
// versions above 4 with UNSUPPORTED_VERSION and this table, so the client
// retries at v4 (KIP-511).
//
// Behavior:
// * v3+ lists the supported features (metadata.SupportedFeatures:
// transaction.version up to 2) and the finalized ones, read from the
// metadata image so every broker answers the same, with the offset of the
// record that last changed them as FinalizedFeaturesEpoch (-1 and none
// when no record did: a cluster bootstrapped before features existed). A
// client uses transactions version 2 only once transaction.version 2 is
// finalized, as Kafka 4 clients do.
func init() {
	register(api{key: kmsg.ApiVersions, min: 0, max: 4, handle: (*Broker).handleApiVersions,
		authorize: authorizeNothing, errors: apiVersionsErrors, quota: requestTime})
}

func apiVersionsErrors(_ kmsg.Request, resp kmsg.Response, code int16) {
	resp.(*kmsg.ApiVersionsResponse).ErrorCode = code
}

func (b *Broker) handleApiVersions(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	resp := req.Body.(*kmsg.ApiVersionsRequest).ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = wire.ApiVersionsKeys(b.versions)
	if resp.Version >= 3 {
		for _, f := range metadata.SupportedFeatures {
			resp.SupportedFeatures = append(resp.SupportedFeatures,
				kmsg.ApiVersionsResponseSupportedFeature{Name: f.Name, MinVersion: f.MinLevel, MaxVersion: f.MaxLevel})
		}
		img := b.image.Load()
		resp.FinalizedFeaturesEpoch = img.FeaturesOffset
		for _, f := range metadata.SupportedFeatures {
			if level, ok := img.Features[f.Name]; ok {
				resp.FinalizedFeatures = append(resp.FinalizedFeatures,
					kmsg.ApiVersionsResponseFinalizedFeature{Name: f.Name, MaxVersionLevel: level, MinVersionLevel: level})
			}
		}
	}
	return respond(resp)
}
