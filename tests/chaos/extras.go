package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Features drawn from a second random stream of the seed (issue 26):
// redundancy pairs, freezes, deploy windows and gates. A stream of their
// own keeps every draw of the main stream (Pick) exactly as it was, and
// lets the main stream gain draws without moving these. The order below
// is fixed: a new feature is drawn after the last one.
//
// Each is drawn for a fraction of the seeds only, and each but the last
// costs little time: a freeze holds a wave for 0.5–3 s (or a rollout for
// 0.5–1.75 s), a gate that gets no data waits its 1 s deadline. A window
// that closes while its rollout runs costs up to two minutes (windows.go),
// so it is drawn for one seed in closingOdds.
type Extras struct {
	// Pairs maps a node to its redundancy group (label sluice.dev/pair);
	// nodes not listed have none.
	Pairs map[string]string
	// Freeze is an operator's freeze the schedule adds; nil: none.
	Freeze *FreezePlan
	// Windows: the changes (index) applied with deploy windows, every one
	// open when the change is applied (docs/chaos.md says why).
	Windows map[int]bool
	// Gates are the gates of each change (index) that has any.
	Gates map[int][]GatePlan
	// Closing is a change whose deploy window closes while it runs, the
	// next opening a minute later (windows.go); nil: none.
	Closing *ClosingPlan
	// ClosingLeftOut is a closing window drawn but left out of a run on
	// real time (onRealTime); nil: none.
	ClosingLeftOut *ClosingPlan
}

// extrasSalt derives the second stream: rand.NewPCG(seed, seed^extrasSalt).
const extrasSalt = 0x6a7e5

// pickExtras draws the scenario's extras from their own stream.
func (s *Scenario) pickExtras() {
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^extrasSalt))
	x := Extras{Pairs: map[string]string{}, Windows: map[int]bool{}, Gates: map[int][]GatePlan{}}
	if rng.IntN(4) == 0 && s.Nodes >= 2 {
		s.pickPairs(rng, &x)
	}
	if rng.IntN(6) == 0 {
		x.Freeze = s.pickFreeze(rng)
	}
	for i := 1; i < len(s.Changes); i++ {
		if rng.IntN(5) == 0 {
			x.Windows[i] = true
		}
	}
	if rng.IntN(4) == 0 {
		for i := 1; i < len(s.Changes); i++ {
			if g := pickGates(rng); len(g) > 0 {
				x.Gates[i] = g
			}
		}
	}
	if rng.IntN(closingOdds) == 0 {
		x.Closing = s.pickClosing(rng)
	}
	s.Extras = x
}

// describeExtras is the extras in Describe's lines.
func (s Scenario) describeExtras(b *strings.Builder) {
	x := s.Extras
	if len(x.Pairs) > 0 {
		fmt.Fprintf(b, "  pairs (%s): %v; maxParallel set to every node so that only the pair rule holds them back\n", pairLabel, x.Pairs)
	}
	if f := x.Freeze; f != nil {
		fmt.Fprintf(b, "  freeze: %s\n", f)
	}
	for _, i := range slices.Sorted(maps.Keys(x.Windows)) {
		fmt.Fprintf(b, "  change %d: deploy windows, one open at apply\n", i)
	}
	for _, i := range slices.Sorted(maps.Keys(x.Gates)) {
		var gs []string
		for _, g := range x.Gates[i] {
			gs = append(gs, g.String())
		}
		fmt.Fprintf(b, "  change %d gates: %s\n", i, strings.Join(gs, "; "))
	}
	if c := x.Closing; c != nil {
		fmt.Fprintf(b, "  %s\n", c)
	}
	if c := x.ClosingLeftOut; c != nil {
		fmt.Fprintf(b, "  (left out on real time: %s; CHAOS_VIRTUAL=1 runs it)\n", c)
	}
}

// ms is a duration in whole milliseconds.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// observeExtras puts what the extras need in the Observation.
func (s *system) observeExtras(o *Observation) {
	o.Pairs = s.sc.pairsOf()
	o.Freezes = s.frozen.list()
	if s.prom != nil {
		o.GateAnswers = s.prom.all()
	}
}
