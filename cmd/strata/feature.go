package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The feature commands are kafka-features.sh's describe, upgrade and
// downgrade: the levels a cluster's brokers support and the one it runs at
// (KIP-584), read from ApiVersions v3+ as Kafka's Admin.describeFeatures
// does (kadm does not wrap it), and changed with UpdateFeatures, sent as
// kmsg rather than through kadm.UpdateFeatures, which drops the broker's
// error message ("is at 2; lowering it to 1 needs a downgrade").

func featureCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "feature",
		Short: "Describe, upgrade and downgrade the cluster's finalized feature levels (transaction.version)",
	}
	o := addClientFlags(cmd)
	cmd.AddCommand(featureDescribeCommand(o), featureUpdateCommand(o, false), featureUpdateCommand(o, true))
	return cmd
}

type featureEntry struct {
	Feature      string `json:"feature"`
	SupportedMin int16  `json:"supported_min"`
	SupportedMax int16  `json:"supported_max"`
	// Finalized is the level the cluster runs at; 0 when none is
	// finalized (the feature is off).
	Finalized int16 `json:"finalized"`
	// Epoch is the offset of the metadata record that last changed the
	// finalized levels, -1 when none did.
	Epoch int64 `json:"epoch"`
}

func featureDescribeCommand(o *clientOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe",
		Short: "List the features the broker supports and the level each is finalized at (ApiVersions)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cl, ctx, done, err := o.adminRequestWith(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
			if err != nil {
				return o.requestError("describing features", err)
			}
			if resp.Version < 3 {
				return fmt.Errorf("describing features: the broker answered ApiVersions v%d; features need v3 or later", resp.Version)
			}
			entries := []featureEntry{}
			for _, f := range resp.SupportedFeatures {
				entries = append(entries, featureEntry{Feature: f.Name, SupportedMin: f.MinVersion, SupportedMax: f.MaxVersion, Epoch: resp.FinalizedFeaturesEpoch})
			}
			for _, f := range resp.FinalizedFeatures {
				i := slices.IndexFunc(entries, func(e featureEntry) bool { return e.Feature == f.Name })
				if i < 0 {
					entries = append(entries, featureEntry{Feature: f.Name, Epoch: resp.FinalizedFeaturesEpoch})
					i = len(entries) - 1
				}
				entries[i].Finalized = f.MaxVersionLevel
			}
			slices.SortFunc(entries, func(a, b featureEntry) int { return strings.Compare(a.Feature, b.Feature) })
			w := cmd.OutOrStdout()
			if o.format == "json" {
				return writeJSON(w, entries)
			}
			t := newTable(w, "FEATURE", "SUPPORTED-MIN", "SUPPORTED-MAX", "FINALIZED", "EPOCH")
			for _, e := range entries {
				t.row(e.Feature, e.SupportedMin, e.SupportedMax, e.Finalized, e.Epoch)
			}
			return t.flush()
		},
	}
}

type featureResult struct {
	Feature string `json:"feature"`
	Level   int16  `json:"level"`
	Error   string `json:"error,omitempty"`
}

// featureUpdateCommand is upgrade, or downgrade when down is set; the
// controller refuses a level below the finalized one unless it is asked
// for as a downgrade.
func featureUpdateCommand(o *clientOptions, down bool) *cobra.Command {
	var features []string
	var dryRun, unsafe bool
	verb, past, example := "upgrade", "upgraded", "transaction.version=2"
	if down {
		verb, past, example = "downgrade", "downgraded", "transaction.version=1"
	}
	cmd := &cobra.Command{
		Use:     verb + " --feature NAME=LEVEL...",
		Short:   "Finalize features at new levels, every broker having to support them (UpdateFeatures)",
		Example: "  strata feature " + verb + " --feature " + example + " --dry-run\n  strata feature " + verb + " --feature " + example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(features) == 0 {
				return errors.New("no --feature NAME=LEVEL given")
			}
			upgradeType := int8(1) // upgrade only
			if down {
				upgradeType = 2 // safe (lossless) downgrade
				if unsafe {
					upgradeType = 3
				}
			}
			req := kmsg.NewPtrUpdateFeaturesRequest()
			req.TimeoutMillis = int32(o.timeout / time.Millisecond)
			req.ValidateOnly = dryRun
			for _, f := range features {
				name, level, err := parseFeatureLevel(f)
				if err != nil {
					return err
				}
				if slices.ContainsFunc(req.FeatureUpdates, func(u kmsg.UpdateFeaturesRequestFeatureUpdate) bool { return u.Feature == name }) {
					return fmt.Errorf("--feature %s given twice", name)
				}
				u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
				u.Feature, u.MaxVersionLevel, u.UpgradeType = name, level, upgradeType
				u.AllowDowngrade = down // v0's form of UpgradeType
				req.FeatureUpdates = append(req.FeatureUpdates, u)
			}
			_, cl, ctx, done, err := o.adminRequestWith(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return o.requestError(verb+" of features", err)
			}
			if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
				return fmt.Errorf("%s of features: %s", verb, explainTopicError(err, deref(resp.ErrorMessage)))
			}
			var results []featureResult
			var failed []string
			for _, u := range req.FeatureUpdates {
				r := featureResult{Feature: u.Feature, Level: u.MaxVersionLevel}
				i := slices.IndexFunc(resp.Results, func(res kmsg.UpdateFeaturesResponseResult) bool { return res.Feature == u.Feature })
				switch {
				case i < 0 && resp.Version < 2: // v2+ answers with the top-level error alone
					r.Error = "no answer for this feature"
				case i >= 0 && resp.Results[i].ErrorCode != 0:
					r.Error = explainTopicError(kerr.ErrorForCode(resp.Results[i].ErrorCode), deref(resp.Results[i].ErrorMessage))
				}
				if r.Error != "" {
					failed = append(failed, fmt.Sprintf("feature %s=%d: %s", r.Feature, r.Level, r.Error))
				}
				results = append(results, r)
			}
			w := cmd.OutOrStdout()
			if o.format == "json" {
				if err := writeJSON(w, results); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					switch {
					case r.Error != "":
					case dryRun:
						fmt.Fprintf(w, "%s could be %s to %d\n", r.Feature, past, r.Level)
					default:
						fmt.Fprintf(w, "%s %s to %d\n", r.Feature, past, r.Level)
					}
				}
			}
			if len(failed) > 0 {
				return errors.New(strings.Join(failed, "; "))
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&features, "feature", nil, "NAME=LEVEL to finalize, repeatable (transaction.version=2: transactions version 2, KIP-890)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate only: report whether the change would be made, without making it")
	if down {
		cmd.Flags().BoolVar(&unsafe, "unsafe", false, "allow a downgrade that can lose metadata (UpgradeType 3); Strata's features have none")
	}
	return cmd
}

// parseFeatureLevel reads "NAME=LEVEL".
func parseFeatureLevel(s string) (string, int16, error) {
	name, level, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return "", 0, fmt.Errorf("--feature %q: want NAME=LEVEL", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(level), 10, 16)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("--feature %q: level must be a whole number from 0 to %d", s, 1<<15-1)
	}
	return name, int16(n), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
