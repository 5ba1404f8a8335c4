package intent

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// MaxWaveGrowth bounds strategy.waveGrowth: a wave a hundred times the
// previous one is already the rest of any fleet, and a growth past the
// range of a node count would overflow the wave sizes.
const MaxWaveGrowth = 100

// ValidateStrategy checks a rollout strategy. Errors name the field by its
// protojson name ("strategy.maxParallel"); docs/rollouts.md has the rules.
func ValidateStrategy(s *sluicev1.Strategy) []*sluicev1.FieldError {
	var errs []*sluicev1.FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, &sluicev1.FieldError{Field: "strategy." + field, Rule: fmt.Sprintf(format, args...)})
	}
	if mp := s.GetMaxParallel(); mp != "" {
		if why := countOrPercent(mp, 1); why != "" {
			add("maxParallel", "%q %s", mp, why)
		}
	}
	if fb := s.GetFailureBudget(); fb != "" {
		if why := countOrPercent(fb, 0); why != "" {
			add("failureBudget", "%q %s", fb, why)
		}
	}
	if g := s.GetWaveGrowth(); g != 0 {
		switch {
		case s.GetFirstWave() == 0:
			add("waveGrowth", "applies to waves; set strategy.firstWave too")
		case math.IsNaN(g) || math.IsInf(g, 0):
			add("waveGrowth", "%g is not a number; it must be from 1 to %d", g, MaxWaveGrowth)
		case g < 1:
			add("waveGrowth", "%g would shrink the waves; it must be at least 1", g)
		case g > MaxWaveGrowth:
			add("waveGrowth", "%g is too large; it must be from 1 to %d", g, MaxWaveGrowth)
		}
	}
	if b := s.GetBakeTime(); b != nil {
		switch {
		case b.CheckValid() != nil || b.AsDuration() < 0:
			add("bakeTime", "%s is not a duration of zero or more", b.AsDuration())
		case s.GetFirstWave() == 0 && s.GetFailureDomain() == "":
			add("bakeTime", "bake time applies between waves or failure domains; set strategy.firstWave or strategy.failureDomain")
		}
	}
	if fd := s.GetFailureDomain(); fd != "" && (len(fd) > 63 || strings.ContainsFunc(fd, unicode.IsSpace)) {
		add("failureDomain", "%q is not a label key (at most 63 characters, no spaces)", fd)
	}
	if s.GetBakeChecks() > 0 && s.GetBakeTime().AsDuration() <= 0 {
		add("bakeChecks", "checks are re-run while nodes bake; set strategy.bakeTime too")
	}
	if i := s.GetBakeCheckInterval(); i != nil {
		switch {
		case !positive(i):
			add("bakeCheckInterval", "%s is not a positive duration", i.AsDuration())
		case s.GetBakeChecks() == 0:
			add("bakeCheckInterval", "applies to bake checks; set strategy.bakeChecks too")
		}
	}
	if s.GetMaxUnprovenDomains() > 0 && s.GetFailureDomain() == "" {
		add("maxUnprovenDomains", "limits failure-domain values in progress at once; set strategy.failureDomain too")
	}
	for i, w := range s.GetWindows() {
		if _, err := contract.ParseWindow(w); err != nil {
			add(fmt.Sprintf("windows[%d]", i), "%v", err)
		}
	}
	if _, err := contract.ResolveGates(s); err != nil {
		field, rule, _ := strings.Cut(err.Error(), ": ")
		errs = append(errs, &sluicev1.FieldError{Field: field, Rule: rule})
	}
	switch w := s.GetWhileActive(); w {
	case "", contract.WhileActiveQueue, contract.WhileActiveSupersede:
	default:
		add("whileActive", "%q is not a policy: use %q (wait for the running rollout to end) or %q (stop it once its in-flight nodes settled)",
			w, contract.WhileActiveQueue, contract.WhileActiveSupersede)
	}
	for _, d := range []struct {
		field string
		set   bool
		ok    bool
		val   string
	}{
		{"applyDeadline", s.GetApplyDeadline() != nil, positive(s.GetApplyDeadline()), s.GetApplyDeadline().AsDuration().String()},
		{"pickupDeadline", s.GetPickupDeadline() != nil, positive(s.GetPickupDeadline()), s.GetPickupDeadline().AsDuration().String()},
		{"progressDeadline", s.GetProgressDeadline() != nil, positive(s.GetProgressDeadline()), s.GetProgressDeadline().AsDuration().String()},
	} {
		if d.set && !d.ok {
			add(d.field, "%s is not a positive duration", d.val)
		}
	}
	// Compared only when both are valid, so a bad value is reported once.
	if a, p := s.GetApplyDeadline(), s.GetPickupDeadline(); positive(a) && positive(p) && p.AsDuration() < a.AsDuration() {
		add("pickupDeadline", "%s is shorter than the apply deadline %s; a node that never acknowledged gets at least the apply deadline",
			p.AsDuration(), a.AsDuration())
	}
	SortFieldErrors(errs)
	return errs
}

// positive reports whether d is set, valid and above zero.
func positive(d *durationpb.Duration) bool {
	return d != nil && d.CheckValid() == nil && d.AsDuration() > 0
}

// countOrPercent says what is wrong with s as a count >= lo or a percentage
// from lo% to 100%, or "" when it is fine.
func countOrPercent(s string, lo uint64) string {
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		if n, err := strconv.ParseUint(pct, 10, 8); err != nil || n < lo || n > 100 {
			return fmt.Sprintf("is not a percentage from %d%% to 100%%", lo)
		}
		return ""
	}
	if n, err := strconv.ParseUint(s, 10, 32); err != nil || n < lo {
		return fmt.Sprintf(`is not a count of at least %d like "5", or a percentage like "10%%"`, lo)
	}
	return ""
}
