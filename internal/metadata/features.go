package metadata

// Feature flags (KIP-584): a feature's finalized level is the one the
// whole cluster runs at, set by a FeatureLevelRecord in the metadata log so
// that every broker answers the same, as Kafka's KRaft does.

// TransactionVersion is Kafka's transaction.version feature: level 2 is
// transactions version 2 (KIP-890 part 2: the producer epoch bumped at
// every transaction end, EndTxn v5+, Produce v12+ adding partitions
// implicitly, TxnOffsetCommit v5+ adding offsets implicitly). Clients use
// those versions only once the cluster finalizes level 2.
const TransactionVersion = "transaction.version"

// Feature is a feature this version of Strata supports, with its levels.
type Feature struct {
	Name     string `json:"name"`
	MinLevel int16  `json:"minLevel"`
	MaxLevel int16  `json:"maxLevel"`
}

// Supports reports whether features (a broker's supported ones) include
// name at level. Level 0 is every feature's absence, which every broker
// supports.
func Supports(features []Feature, name string, level int16) bool {
	if level == 0 {
		return true
	}
	for _, f := range features {
		if f.Name == name {
			return f.MinLevel <= level && level <= f.MaxLevel
		}
	}
	return false
}

// SupportedFeatures are the features Strata supports (ApiVersions'
// SupportedFeatures), sorted by name.
var SupportedFeatures = []Feature{
	{Name: TransactionVersion, MinLevel: 0, MaxLevel: 2},
}

// BootstrapFeatures are the records that finalize a new cluster's
// features at their highest levels, as Kafka 4 formats a new cluster.
// A cluster whose log predates them keeps level 0 (no record).
func BootstrapFeatures() []Record {
	out := make([]Record, 0, len(SupportedFeatures))
	for _, f := range SupportedFeatures {
		out = append(out, Record{FeatureLevel: &FeatureLevelRecord{Name: f.Name, Level: f.MaxLevel}})
	}
	return out
}
