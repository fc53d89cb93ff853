package controller

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// TestPlanFeatureUpdate: a level is finalized only when this controller
// and every registered broker support it, and lowered only on a
// downgrade. A broker registered before features (none in its record),
// as in a rolling upgrade, holds transaction.version at 0.
func TestPlanFeatureUpdate(t *testing.T) {
	const tv = metadata.TransactionVersion
	broker := func(id int32, features []metadata.Feature) metadata.Record {
		return metadata.Record{Broker: &metadata.BrokerRecord{NodeID: id, Host: "h", Port: 1, Epoch: 1, Features: features}}
	}
	img, err := metadata.Empty().Apply(2, broker(1, metadata.SupportedFeatures), broker(2, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		update FeatureUpdate
		ok     bool
	}{
		{FeatureUpdate{Name: tv, Level: 2}, false}, // broker 2 predates features
		{FeatureUpdate{Name: tv, Level: 0}, true},
		{FeatureUpdate{Name: "unknown", Level: 1}, false},
		{FeatureUpdate{Name: tv, Level: -1, Downgrade: true}, false},
	} {
		if err := planFeatureUpdate(img, c.update); (err == nil) != c.ok || err != nil && !errors.Is(err, kerr.InvalidUpdateVersion) {
			t.Errorf("%+v with broker 2 before features: %v, want ok %v", c.update, err, c.ok)
		}
	}
	img, err = img.Apply(4, broker(2, metadata.SupportedFeatures),
		metadata.Record{FeatureLevel: &metadata.FeatureLevelRecord{Name: tv, Level: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		update FeatureUpdate
		ok     bool
	}{
		{FeatureUpdate{Name: tv, Level: 2}, true},
		{FeatureUpdate{Name: tv, Level: 3}, false},
		{FeatureUpdate{Name: tv, Level: 1}, false}, // lower, not a downgrade
		{FeatureUpdate{Name: tv, Level: 1, Downgrade: true}, true},
	} {
		if err := planFeatureUpdate(img, c.update); (err == nil) != c.ok {
			t.Errorf("%+v with both brokers at transaction.version 2: %v, want ok %v", c.update, err, c.ok)
		}
	}
	if img.FeaturesOffset != 4 || img.Features[tv] != 2 {
		t.Fatalf("image features %v at %d", img.Features, img.FeaturesOffset)
	}
}
