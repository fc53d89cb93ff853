package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/wire"
)

// UpdateFeatures: v0-1, forwarded to the active controller, which writes
// FeatureLevel records (controller.UpdateFeatures); ALTER on the cluster
// (authz.go).
//
// Behavior:
// * The one feature is transaction.version (0-2): a cluster created
// before features existed moves to transactions version 2 with
// UpdateFeatures transaction.version=2 once every broker supports it, and
// back with a downgrade (v0 AllowDowngrade, v1 UpgradeType 2 or 3), which
// is safe: clients move to the finalized version at their next
// transaction.
// * All or nothing, as Kafka's controller (QuorumController.updateFeatures):
// when an update fails (an unknown feature, an unsupported level, a level
// a registered broker does not support, or a downgrade not asked for),
// nothing is written and the answer is that update's error at the top
// level (INVALID_UPDATE_VERSION), with no per-feature results; a client
// that reads only the results (sarama) would otherwise see success. When
// the controller cannot be reached, the top level and every feature carry
// the error, as Kafka's error response does. On success every feature is
// answered NONE. v1's ValidateOnly checks without writing.
func init() {
	register(api{key: kmsg.UpdateFeatures, min: 0, max: 1, handle: (*Broker).handleUpdateFeatures, forwarded: true,
		authorize: clusterRule(auth.OpAlter), errors: updateFeaturesErrors, quota: requestTime})
}

func (b *Broker) handleUpdateFeatures(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.UpdateFeaturesRequest)
	resp := r.ResponseKind().(*kmsg.UpdateFeaturesResponse)
	return b.deferController(ctx, r.TimeoutMillis, func(ctx context.Context) kmsg.Response {
		updates := make([]controller.FeatureUpdate, len(r.FeatureUpdates))
		for i, u := range r.FeatureUpdates {
			downgrade := u.AllowDowngrade
			if r.Version >= 1 {
				downgrade = u.UpgradeType == 2 || u.UpgradeType == 3
			}
			updates[i] = controller.FeatureUpdate{Name: u.Feature, Level: u.MaxVersionLevel, Downgrade: downgrade}
		}
		err := b.controller.UpdateFeatures(ctx, updates, r.ValidateOnly)
		code := errorCode(err)
		if code == kerr.InvalidUpdateVersion.Code {
			resp.ErrorCode = code
			msg := "The update failed for all features since the following feature had an error: " + err.Error()
			resp.ErrorMessage = &msg
			return resp
		}
		resp.ErrorCode, resp.ErrorMessage = code, errorMessage(err)
		for _, u := range r.FeatureUpdates {
			res := kmsg.NewUpdateFeaturesResponseResult()
			res.Feature = u.Feature
			res.ErrorCode, res.ErrorMessage = code, errorMessage(err)
			resp.Results = append(resp.Results, res)
		}
		return resp
	})
}

// updateFeaturesErrors answers the request and each feature it names with
// code.
func updateFeaturesErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.UpdateFeaturesResponse)
	out.ErrorCode = code
	for _, u := range req.(*kmsg.UpdateFeaturesRequest).FeatureUpdates {
		res := kmsg.NewUpdateFeaturesResponseResult()
		res.Feature, res.ErrorCode = u.Feature, code
		out.Results = append(out.Results, res)
	}
}
