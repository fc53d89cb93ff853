package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// FeatureUpdate is one feature of an UpdateFeatures request: finalize Name
// at Level (0 removes it). A level below the finalized one needs
// Downgrade.
type FeatureUpdate struct {
	Name      string
	Level     int16
	Downgrade bool
}

// UpdateFeatures finalizes feature levels, as Kafka's
// FeatureControlManager does: each update must name a feature this
// controller supports, at a level it supports, that every registered
// broker supports (a broker from before features supports only level 0,
// so a cluster in the middle of a rolling upgrade cannot move on), and may
// lower a level only when asked to. The request is all or nothing, as in
// Kafka: the first update that fails fails it, with that update's error
// (INVALID_UPDATE_VERSION), and nothing is written; else every update is
// written in one metadata change (none with validateOnly).
func (c *Controller) UpdateFeatures(ctx context.Context, updates []FeatureUpdate, validateOnly bool) error {
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		var records []metadata.Record
		for _, u := range updates {
			if err := planFeatureUpdate(img, u); err != nil {
				return nil, err
			}
			if !validateOnly && img.Features[u.Name] != u.Level {
				records = append(records, metadata.Record{FeatureLevel: &metadata.FeatureLevelRecord{Name: u.Name, Level: u.Level}})
			}
		}
		return records, nil
	})
	return err
}

func planFeatureUpdate(img *metadata.Image, u FeatureUpdate) error {
	i := slices.IndexFunc(metadata.SupportedFeatures, func(f metadata.Feature) bool { return f.Name == u.Name })
	switch {
	case i < 0:
		return fmt.Errorf("%w: unknown feature %q", kerr.InvalidUpdateVersion, u.Name)
	case u.Level < 0 || !metadata.Supports(metadata.SupportedFeatures[i:i+1], u.Name, u.Level):
		f := metadata.SupportedFeatures[i]
		return fmt.Errorf("%w: %s level %d, supported %d-%d", kerr.InvalidUpdateVersion, u.Name, u.Level, f.MinLevel, f.MaxLevel)
	case u.Level < img.Features[u.Name] && !u.Downgrade:
		return fmt.Errorf("%w: %s is at %d; lowering it to %d needs a downgrade", kerr.InvalidUpdateVersion, u.Name, img.Features[u.Name], u.Level)
	}
	for _, id := range slices.Sorted(maps.Keys(img.Brokers)) {
		if b := img.Brokers[id]; !metadata.Supports(b.Features, u.Name, u.Level) {
			return fmt.Errorf("%w: broker %d does not support %s level %d", kerr.InvalidUpdateVersion, id, u.Name, u.Level)
		}
	}
	return nil
}
