package intent

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestValidateStrategy(t *testing.T) {
	d := durationpb.New
	tests := []struct {
		name      string
		given     *sluicev1.Strategy
		wantField string // "" = valid
		wantRule  string
	}{
		{"empty is valid", &sluicev1.Strategy{}, "", ""},
		{"nil is valid", nil, "", ""},
		{"everything set and consistent", &sluicev1.Strategy{MaxParallel: "10%", FirstWave: 5, WaveGrowth: 1.5, BakeTime: d(time.Minute),
			FailureDomain: "topology.kubernetes.io/zone", FailureBudget: "2", ApplyDeadline: d(time.Minute), PickupDeadline: d(2 * time.Minute),
			ProgressDeadline: d(time.Hour), RetryInvalid: true}, "", ""},
		{"whileActive supersede", &sluicev1.Strategy{WhileActive: "supersede"}, "", ""},
		{"whileActive queue", &sluicev1.Strategy{WhileActive: "queue"}, "", ""},
		{"whileActive unknown", &sluicev1.Strategy{WhileActive: "replace"}, "strategy.whileActive", `"replace" is not a policy`},
		{"maxParallel zero", &sluicev1.Strategy{MaxParallel: "0"}, "strategy.maxParallel", "count of at least 1"},
		{"maxParallel 0%", &sluicev1.Strategy{MaxParallel: "0%"}, "strategy.maxParallel", "percentage"},
		{"maxParallel words", &sluicev1.Strategy{MaxParallel: "many"}, "strategy.maxParallel", `"many"`},
		{"failureBudget zero is valid", &sluicev1.Strategy{FailureBudget: "0"}, "", ""},
		{"failureBudget percent", &sluicev1.Strategy{FailureBudget: "5%"}, "", ""},
		{"failureBudget negative", &sluicev1.Strategy{FailureBudget: "-1"}, "strategy.failureBudget", `"-1"`},
		{"failureBudget over 100%", &sluicev1.Strategy{FailureBudget: "101%"}, "strategy.failureBudget", "100%"},
		{"waveGrowth without waves", &sluicev1.Strategy{WaveGrowth: 2}, "strategy.waveGrowth", "firstWave"},
		{"waveGrowth below one", &sluicev1.Strategy{FirstWave: 2, WaveGrowth: 0.5}, "strategy.waveGrowth", "at least 1"},
		{"waveGrowth one keeps waves equal", &sluicev1.Strategy{FirstWave: 2, WaveGrowth: 1}, "", ""},
		{"waveGrowth not a number", &sluicev1.Strategy{FirstWave: 2, WaveGrowth: math.NaN()}, "strategy.waveGrowth", "not a number"},
		{"waveGrowth infinite", &sluicev1.Strategy{FirstWave: 2, WaveGrowth: math.Inf(1)}, "strategy.waveGrowth", "not a number"},
		{"waveGrowth at the maximum", &sluicev1.Strategy{FirstWave: 1, WaveGrowth: MaxWaveGrowth}, "", ""},
		// Found by FuzzValidateStrategy: wave sizes past the int range made
		// the coordinator's plan loop for ever.
		{"waveGrowth above the maximum", &sluicev1.Strategy{FirstWave: 1, WaveGrowth: 1e19}, "strategy.waveGrowth", "1e+19 is too large; it must be from 1 to 100"},
		{"firstWave alone uses the default growth", &sluicev1.Strategy{FirstWave: 3}, "", ""},
		{"bakeTime zero with waves", &sluicev1.Strategy{FirstWave: 1, BakeTime: d(0)}, "", ""},
		{"bakeTime without stages", &sluicev1.Strategy{BakeTime: d(time.Minute)}, "strategy.bakeTime", "between waves or failure domains"},
		{"bakeTime negative", &sluicev1.Strategy{FirstWave: 1, BakeTime: d(-time.Second)}, "strategy.bakeTime", "zero or more"},
		{"bakeTime with a failure domain", &sluicev1.Strategy{FailureDomain: "zone", BakeTime: d(time.Minute)}, "", ""},
		{"failureDomain too long", &sluicev1.Strategy{FailureDomain: strings.Repeat("z", 64)}, "strategy.failureDomain", "63 characters"},
		{"bakeChecks with a bake", &sluicev1.Strategy{FirstWave: 1, BakeTime: d(time.Minute), BakeChecks: 3, BakeCheckInterval: d(10 * time.Second)}, "", ""},
		{"bakeChecks without a bake", &sluicev1.Strategy{FirstWave: 1, BakeChecks: 3}, "strategy.bakeChecks", "set strategy.bakeTime"},
		{"bakeCheckInterval zero", &sluicev1.Strategy{FirstWave: 1, BakeTime: d(time.Minute), BakeChecks: 1, BakeCheckInterval: d(0)}, "strategy.bakeCheckInterval", "positive duration"},
		{"bakeCheckInterval without bakeChecks", &sluicev1.Strategy{FirstWave: 1, BakeTime: d(time.Minute), BakeCheckInterval: d(time.Second)}, "strategy.bakeCheckInterval", "set strategy.bakeChecks"},
		{"maxUnprovenDomains with a failure domain", &sluicev1.Strategy{FailureDomain: "zone", MaxUnprovenDomains: 3}, "", ""},
		{"maxUnprovenDomains without a failure domain", &sluicev1.Strategy{MaxUnprovenDomains: 2}, "strategy.maxUnprovenDomains", "set strategy.failureDomain"},
		{"failureDomain of 63 characters", &sluicev1.Strategy{FailureDomain: strings.Repeat("z", 63)}, "", ""},
		{"failureDomain with a tab", &sluicev1.Strategy{FailureDomain: "zo\tne"}, "strategy.failureDomain", "label key"},
		{"failureBudget 100%", &sluicev1.Strategy{FailureBudget: "100%"}, "", ""},
		{"failureBudget 0%", &sluicev1.Strategy{FailureBudget: "0%"}, "", ""},
		{"failureBudget words", &sluicev1.Strategy{FailureBudget: "some"}, "strategy.failureBudget", `"some"`},
		{"failureDomain with a space", &sluicev1.Strategy{FailureDomain: "my zone"}, "strategy.failureDomain", "label key"},
		{"applyDeadline zero", &sluicev1.Strategy{ApplyDeadline: d(0)}, "strategy.applyDeadline", "positive duration"},
		{"applyDeadline out of range", &sluicev1.Strategy{ApplyDeadline: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "strategy.applyDeadline", "positive duration"},
		{"pickupDeadline zero", &sluicev1.Strategy{PickupDeadline: d(0)}, "strategy.pickupDeadline", "positive duration"},
		{"progressDeadline negative", &sluicev1.Strategy{ProgressDeadline: d(-time.Minute)}, "strategy.progressDeadline", "positive duration"},
		{"pickup equal to apply", &sluicev1.Strategy{ApplyDeadline: d(time.Minute), PickupDeadline: d(time.Minute)}, "", ""},
		{"pickup alone shorter than the default apply", &sluicev1.Strategy{PickupDeadline: d(time.Second)}, "", ""},
		{"pickup zero with apply is one error", &sluicev1.Strategy{ApplyDeadline: d(time.Minute), PickupDeadline: d(0)}, "strategy.pickupDeadline", "positive duration"},
		{"pickup shorter than apply", &sluicev1.Strategy{ApplyDeadline: d(time.Minute), PickupDeadline: d(time.Second)}, "strategy.pickupDeadline", "shorter than the apply deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateStrategy(tc.given)
			if tc.wantField == "" {
				if len(errs) != 0 {
					t.Fatalf("want valid, got %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].GetField() != tc.wantField || !strings.Contains(errs[0].GetRule(), tc.wantRule) {
				t.Fatalf("got %v; want one error on %s mentioning %q", errs, tc.wantField, tc.wantRule)
			}
		})
	}
}
