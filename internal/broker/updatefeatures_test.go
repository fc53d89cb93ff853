package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestUpdateFeaturesAllOrNothing: as Kafka's controller, an UpdateFeatures
// request with a failing update writes nothing and answers the failure at
// the top level, with no per-feature results. sarama, which reads only the
// top-level error, reports it; and a valid update beside a failing one is
// not applied.
func TestUpdateFeaturesAllOrNothing(t *testing.T) {
	tb := startBroker(t, txnSettings)
	const tv = "transaction.version"
	if got := finalizedTV(t, tb.Addr()); got != 2 {
		t.Fatalf("a new cluster finalizes transaction.version %d, want 2", got)
	}

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Admin.Retry.Max = 0
	admin, err := sarama.NewClusterAdmin([]string{tb.Addr()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, err = admin.UpdateFeatures([]sarama.FeatureUpdate{{Feature: "no.such.version", MaxVersionLevel: 1}})
	if !errors.Is(err, sarama.ErrInvalidUpdateVersion) {
		t.Fatalf("sarama's UpdateFeatures of an unknown feature: %v, want INVALID_UPDATE_VERSION", err)
	}

	// A valid downgrade beside an unknown feature: neither is applied.
	req := kmsg.NewPtrUpdateFeaturesRequest()
	req.Version, req.TimeoutMillis = 1, 30_000
	down := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	down.Feature, down.MaxVersionLevel, down.UpgradeType = tv, 0, 2
	unknown := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	unknown.Feature, unknown.MaxVersionLevel, unknown.UpgradeType = "no.such.version", 1, 1
	req.FeatureUpdates = []kmsg.UpdateFeaturesRequestFeatureUpdate{down, unknown}
	resp := rawRequest(t, tb.Addr(), req).(*kmsg.UpdateFeaturesResponse)
	wantCode(t, "a valid and an unknown feature", resp.ErrorCode, kerr.InvalidUpdateVersion)
	if len(resp.Results) != 0 || resp.ErrorMessage == nil {
		t.Fatalf("a failed request answered %d results, message %v; want none and a message", len(resp.Results), resp.ErrorMessage)
	}
	if got := finalizedTV(t, tb.Addr()); got != 2 {
		t.Fatalf("after a failed request transaction.version %d, want 2 (nothing written)", got)
	}

	// The valid update alone goes through, and sarama sees success.
	if _, err := admin.UpdateFeatures([]sarama.FeatureUpdate{{Feature: tv, MaxVersionLevel: 1, AllowDowngrade: true}}); err != nil {
		t.Fatalf("sarama's downgrade of %s: %v", tv, err)
	}
	if got := finalizedTV(t, tb.Addr()); got != 1 {
		t.Fatalf("after the downgrade transaction.version %d, want 1", got)
	}
}
