package contract

import (
	"fmt"
	"slices"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Config features: what a desired config may need of the agent that reads
// it, beyond the config schema of the baseline release (commit 8c96385, the
// first release agents of which run in fleets: DesiredConfig fields 1 to 12
// and the NodeConfig and intents of that commit). Each later addition to
// what an agent must understand to put a desired config in force gets a
// feature here, and FeaturesOf says when a config needs it. An agent states
// the features it reads in its presence (NodePresence.config_features); an
// agent whose presence states none is of the baseline release. The
// coordinator writes no config to an agent that does not read it
// (docs/deploy.md, "Version skew"), and a desired config names the features
// it needs (DesiredConfig.features), so that an agent older than the
// config reports it INCOMPATIBLE rather than taking it for garbage.
const (
	// FeatureBakeChecks: DesiredConfig.bake_checks (Strategy.bake_checks:
	// re-run the checks while baking).
	FeatureBakeChecks = "bakeChecks"
)

// ConfigFeatures are the features this version's agent reads, sorted.
var ConfigFeatures = []string{FeatureBakeChecks}

// FeaturesOf is the features reading d needs, sorted; nil for a config an
// agent of the baseline release reads.
func FeaturesOf(d *sluicev1.DesiredConfig) []string {
	if d.GetBakeChecks() != nil {
		return []string{FeatureBakeChecks}
	}
	return nil
}

// MissingFeatures is the features of needs that reads lacks, in the order of
// needs; nil when reads has them all.
func MissingFeatures(reads, needs []string) []string {
	var out []string
	for _, f := range needs {
		if !slices.Contains(reads, f) {
			out = append(out, f)
		}
	}
	return out
}

// CannotRead is the version-skew rule, in one place: the features desired
// config d needs (FeaturesOf) that an agent reading the features reads (its
// presence's config_features; none stated: the baseline release) lacks; nil
// when it reads d. The coordinator asks it before writing any node, the
// configurator at apply time, so that the operator hears "no" before a
// rollout is stored (docs/rollouts.md, "Version skew").
func CannotRead(reads []string, d *sluicev1.DesiredConfig) []string {
	needs := FeaturesOf(d)
	if len(needs) == 0 {
		return nil
	}
	return MissingFeatures(reads, needs)
}

// DescribeCannotRead is the sentence for an agent of version, reading
// reads, that lacks missing (CannotRead) for a config of fingerprint
// target (shortened by the caller).
func DescribeCannotRead(version string, reads, missing []string, target string) string {
	if version == "" {
		version = "(version unknown)"
	}
	has := strings.Join(reads, ",")
	if has == "" {
		has = "none: an agent of the baseline release"
	}
	return fmt.Sprintf("its agent %s does not read config feature(s) %s, which its target %s needs (it reads %s)",
		version, strings.Join(missing, ", "), target, has)
}
