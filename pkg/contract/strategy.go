package contract

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Strategy defaults, documented in docs/rollouts.md.
const (
	DefaultWaveGrowth       = 2.0
	DefaultApplyDeadline    = 5 * time.Minute
	DefaultPickupDeadline   = 10 * time.Minute
	DefaultProgressDeadline = time.Hour
	// DefaultBakeCheckInterval is how often an agent re-runs its checks
	// while its node bakes, when the strategy asks for bake checks.
	DefaultBakeCheckInterval = 30 * time.Second
)

// LabelPair is the node label that names a node's redundancy group (an MLAG
// pair, two route reflectors, a pair of border routers): a rollout never
// has two members of one group unproven at once — a desired config written
// and not yet reported Provisioned, or Provisioned in a stage whose bake has
// not yet passed — whatever maxParallel and the waves allow. Nodes without
// it, or with an empty value, are in no group. docs/rollouts.md, "Redundancy
// groups".
const LabelPair = "sluice.dev/pair"

// Plan is a rollout strategy resolved against the number of nodes in the
// rollout: what the coordinator follows, and what a dry run shows. Defined
// once here so that the two cannot disagree about what "10%" means.
type Plan struct {
	MaxParallel    int
	Budget         int   // failures allowed; one more stops and reverts
	Waves          []int // cumulative node counts at the end of each wave; nil = no waves
	Bake           time.Duration
	DomainKey      string
	Domains        int // failure-domain values a stage takes (max unproven domains); at least 1
	ApplyDeadline  time.Duration
	PickupDeadline time.Duration
	Progress       time.Duration
	RetryInvalid   bool
	// SkipIncompatible skips the nodes whose agent cannot read their target
	// instead of refusing the rollout (Strategy.skip_incompatible).
	SkipIncompatible bool
	Windows          []Window // waves start only within one of them; none: any time
	Gates            []Gate   // metric gates before each next stage and the end; alert gates throughout
	// BakeChecks is how many re-runs of its checks every node provisioned
	// in a stage must have passed before the next stage starts (0: none),
	// the agent re-running them every BakeCheckInterval.
	BakeChecks        int
	BakeCheckInterval time.Duration
}

// BakeChecksOf is what a desired config written under p asks its agent to
// re-run while its node bakes, nil when p asks for nothing.
func (p Plan) BakeChecksOf() *sluicev1.BakeChecks {
	if p.BakeChecks <= 0 {
		return nil
	}
	return &sluicev1.BakeChecks{Passes: uint32(p.BakeChecks), Interval: durationpb.New(p.BakeCheckInterval), For: durationpb.New(p.Bake)}
}

// ResolveStrategy turns st into a Plan for total nodes. The configurator
// validates strategies (intent.ValidateStrategy); an error here means a
// strategy stored by something else.
func ResolveStrategy(st *sluicev1.Strategy, total int) (Plan, error) {
	p := Plan{
		Bake: st.GetBakeTime().AsDuration(), DomainKey: st.GetFailureDomain(), RetryInvalid: st.GetRetryInvalid(),
		SkipIncompatible: st.GetSkipIncompatible(),
		Domains:          max(1, int(st.GetMaxUnprovenDomains())),
		BakeChecks:       int(st.GetBakeChecks()), BakeCheckInterval: orDuration(st.GetBakeCheckInterval().AsDuration(), DefaultBakeCheckInterval),
		ApplyDeadline:  orDuration(st.GetApplyDeadline().AsDuration(), DefaultApplyDeadline),
		PickupDeadline: orDuration(st.GetPickupDeadline().AsDuration(), DefaultPickupDeadline),
		Progress:       orDuration(st.GetProgressDeadline().AsDuration(), DefaultProgressDeadline),
	}
	for i, text := range st.GetWindows() {
		w, err := ParseWindow(text)
		if err != nil {
			return p, fmt.Errorf("strategy.windows[%d]: %w", i, err)
		}
		p.Windows = append(p.Windows, w)
	}
	var err error
	if p.Gates, err = ResolveGates(st); err != nil {
		return p, err
	}
	if p.MaxParallel, err = countOrPercent("strategy.maxParallel", st.GetMaxParallel(), total, 1, true); err != nil {
		return p, err
	}
	if p.Budget, err = countOrPercent("strategy.failureBudget", st.GetFailureBudget(), total, 0, false); err != nil {
		return p, err
	}
	if first := int(st.GetFirstWave()); first > 0 {
		growth := st.GetWaveGrowth()
		if growth < 1 {
			growth = DefaultWaveGrowth
		}
		size, sum := first, 0
		for sum < total {
			sum += size
			p.Waves = append(p.Waves, min(sum, total))
			// Computed in float and capped at the fleet: a growth past the
			// range of int (stored state the configurator did not
			// validate) must not overflow the size and loop forever.
			if next := math.Ceil(float64(size) * growth); next < float64(total) {
				size = max(int(next), 1)
			} else {
				size = total
			}
		}
	}
	return p, nil
}

// ResolveMaxParallel resolves only the strategy's maxParallel.
func ResolveMaxParallel(st *sluicev1.Strategy, total int) (int, error) {
	return countOrPercent("strategy.maxParallel", st.GetMaxParallel(), total, 1, true)
}

// countOrPercent reads "N" or "N%" of total; "" is def. A percentage of
// maxParallel rounds up and is at least one node; of a budget it rounds down.
func countOrPercent(field, s string, total, def int, up bool) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	lo := 0
	if up {
		lo = 1
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < lo || n > 100 {
			return 0, fmt.Errorf("%s %q: a percentage must be %d%%-100%%", field, s, lo)
		}
		if up {
			return max(1, (total*n+99)/100), nil
		}
		return total * n / 100, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo {
		return 0, fmt.Errorf("%s %q: must be a count of at least %d or a percentage like 10%%", field, s, lo)
	}
	return n, nil
}

func orDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Describe says what the plan does, for a RolloutStarted event or a dry run.
func (p Plan) Describe() string {
	parts := []string{fmt.Sprintf("maxParallel %d", p.MaxParallel), fmt.Sprintf("failure budget %d", p.Budget)}
	if p.Waves != nil {
		parts = append(parts, fmt.Sprintf("waves ending at %v nodes", p.Waves))
	}
	if p.DomainKey != "" {
		parts = append(parts, DomainsAtATime(p.DomainKey, p.Domains))
	}
	if p.Bake > 0 {
		parts = append(parts, "bake "+p.Bake.String())
	}
	if p.BakeChecks > 0 {
		parts = append(parts, fmt.Sprintf("%d passed check re-runs (every %s) on every node before the next stage", p.BakeChecks, p.BakeCheckInterval))
	}
	if len(p.Windows) > 0 {
		parts = append(parts, "waves start within "+DescribeWindows(p.Windows))
	}
	for _, g := range p.Gates {
		parts = append(parts, "gate "+g.Describe())
	}
	return strings.Join(parts, ", ")
}

// DomainsAtATime says how many values of failure-domain label key a stage
// takes: "one zone at a time", "up to 3 zone values at a time".
func DomainsAtATime(key string, n int) string {
	if n <= 1 {
		return "one " + key + " at a time"
	}
	return fmt.Sprintf("up to %d %s values at a time", n, key)
}

// DomainSortKey is a node's failure-domain sort key for the strategy's
// failureDomain label key: "0"+value for a labelled node, "1" for one
// without the label (so unlabelled nodes go last); "" without a key. The
// rollout record's domain holds it.
func DomainSortKey(key string, labels map[string]string) string {
	if key == "" {
		return ""
	}
	if v, ok := labels[key]; ok {
		return "0" + v
	}
	return "1"
}

// DomainLabel is the value a DomainSortKey stands for, "(unlabelled)" for
// nodes without the label.
func DomainLabel(sortKey string) string {
	if sortKey == "1" {
		return "(unlabelled)"
	}
	return strings.TrimPrefix(sortKey, "0")
}
