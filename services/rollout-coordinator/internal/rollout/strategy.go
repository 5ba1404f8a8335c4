package rollout

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Strategy defaults, documented in docs/rollouts.md.
const (
	DefaultWaveGrowth       = 2.0
	DefaultApplyDeadline    = 5 * time.Minute
	DefaultPickupDeadline   = 10 * time.Minute
	DefaultProgressDeadline = time.Hour
)

// plan is a strategy resolved against the number of nodes in the rollout.
type plan struct {
	maxParallel    int
	budget         int   // failures allowed; one more stops and reverts
	waves          []int // cumulative node counts at the end of each wave; nil = no waves
	bake           time.Duration
	domainKey      string
	applyDeadline  time.Duration
	pickupDeadline time.Duration
	progress       time.Duration
	retryInvalid   bool
}

// resolve turns st into a plan for total nodes. The configurator validates
// strategies; an error here means stored state from elsewhere.
func resolve(st *sluicev1.Strategy, total int) (plan, error) {
	p := plan{
		bake: st.GetBakeTime().AsDuration(), domainKey: st.GetFailureDomain(), retryInvalid: st.GetRetryInvalid(),
		applyDeadline:  orDuration(st.GetApplyDeadline().AsDuration(), DefaultApplyDeadline),
		pickupDeadline: orDuration(st.GetPickupDeadline().AsDuration(), DefaultPickupDeadline),
		progress:       orDuration(st.GetProgressDeadline().AsDuration(), DefaultProgressDeadline),
	}
	var err error
	if p.maxParallel, err = countOrPercent("strategy.maxParallel", st.GetMaxParallel(), total, 1, true); err != nil {
		return p, err
	}
	if p.budget, err = countOrPercent("strategy.failureBudget", st.GetFailureBudget(), total, 0, false); err != nil {
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
			p.waves = append(p.waves, min(sum, total))
			size = int(math.Ceil(float64(size) * growth))
		}
	}
	return p, nil
}

// maxParallel resolves only the strategy's maxParallel.
func maxParallel(st *sluicev1.Strategy, total int) (int, error) {
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
