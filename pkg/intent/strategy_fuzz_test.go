package intent_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fuzzTotals are the fleet sizes an accepted strategy is resolved against.
var fuzzTotals = []int{0, 1, 7, 1000}

// FuzzValidateStrategy checks arbitrary rollout strategies, decoded from
// binary protobuf. ValidateStrategy never panics; every problem names a
// strategy field; a strategy re-validates identically after a protojson
// round trip (what the CLI sends and the configurator reads); and a
// strategy it accepts is one the coordinator can follow: it resolves, for
// any fleet size, to at least one node at a time, a budget of zero or
// more and waves that grow to the whole fleet — and its wave sizes cannot
// overflow, which once made contract.ResolveStrategy loop for ever on
// waveGrowth 1e19.
func FuzzValidateStrategy(f *testing.F) {
	d := durationpb.New
	for _, st := range []*sluicev1.Strategy{
		{},
		{MaxParallel: "10%", FirstWave: 5, WaveGrowth: 1.5, BakeTime: d(time.Minute), FailureDomain: "topology.kubernetes.io/zone",
			FailureBudget: "2", ApplyDeadline: d(time.Minute), PickupDeadline: d(2 * time.Minute), ProgressDeadline: d(time.Hour), RetryInvalid: true},
		{MaxParallel: "0%", FailureBudget: "101%", WhileActive: "replace"},
		{FirstWave: 2, WaveGrowth: math.NaN(), BakeTime: d(-time.Second)},
		{FirstWave: 1, WaveGrowth: intent.MaxWaveGrowth},
		{ApplyDeadline: d(time.Hour), PickupDeadline: d(time.Minute), WhileActive: contract.WhileActiveSupersede},
		{BakeTime: &durationpb.Duration{Seconds: 1, Nanos: -1}, FailureDomain: "has space"},
		{FirstWave: 1, Windows: []string{"Mon-Fri 09:00-16:00 Europe/Berlin", "* 22:00-02:00", "Sat,Sun 00:00-24:00 UTC"}},
		{Windows: []string{"Mox 25:00-26:00 Mars/Olympus", "", "Fri-Mon 10:00"}},
	} {
		b, err := proto.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var st sluicev1.Strategy
		if proto.Unmarshal(data, &st) != nil {
			return
		}
		errs := intent.ValidateStrategy(&st)
		for _, fe := range errs {
			if !strings.HasPrefix(fe.GetField(), "strategy.") || fe.GetRule() == "" || fe.GetIntent() != "" {
				t.Fatalf("problem does not name a strategy field and a rule: %v", fe)
			}
		}
		if js, err := protojson.Marshal(&st); err == nil { // invalid durations do not encode
			var again sluicev1.Strategy
			if err := protojson.Unmarshal(js, &again); err != nil {
				t.Fatalf("%s does not decode: %v", js, err)
			}
			if got := intent.ValidateStrategy(&again); !slices.EqualFunc(errs, got, func(a, b *sluicev1.FieldError) bool { return proto.Equal(a, b) }) {
				t.Fatalf("protojson round trip validates differently:\n  %v\n  %v", errs, got)
			}
		}
		if len(errs) > 0 {
			return
		}
		for _, total := range fuzzTotals {
			checkPlan(t, &st, total)
		}
	})
}

// checkPlan fails unless the accepted strategy st resolves to a plan the
// coordinator can follow over total nodes.
func checkPlan(t *testing.T, st *sluicev1.Strategy, total int) {
	t.Helper()
	// Each wave is the previous one times waveGrowth, rounded up, starting
	// from firstWave; a size past the int range wraps and never ends the loop.
	if g := st.GetWaveGrowth(); st.GetFirstWave() > 0 && float64(max(int(st.GetFirstWave()), total))*max(g, contract.DefaultWaveGrowth) >= 1<<62 {
		t.Fatalf("accepted waveGrowth %g with firstWave %d: wave sizes overflow", g, st.GetFirstWave())
	}
	p, err := contract.ResolveStrategy(st, total)
	if err != nil {
		t.Fatalf("accepted strategy %v does not resolve for %d nodes: %v", st, total, err)
	}
	if p.MaxParallel < 1 || p.Budget < 0 {
		t.Fatalf("strategy %v for %d nodes: maxParallel %d, budget %d", st, total, p.MaxParallel, p.Budget)
	}
	if p.Waves == nil {
		return
	}
	if !slices.IsSorted(p.Waves) || p.Waves[0] < 1 || p.Waves[len(p.Waves)-1] != total {
		t.Fatalf("strategy %v for %d nodes: waves %v do not grow to the fleet", st, total, p.Waves)
	}
}
