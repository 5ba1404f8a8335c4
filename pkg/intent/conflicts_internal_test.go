package intent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestClashing_AgreesWithThePairwiseCheck compares the grouped decision with
// CanShareNode over every pair, on seeded random selectors drawn from a few
// keys and values (so that equal, disjoint and overlapping selectors all occur).
func TestClashing_AgreesWithThePairwiseCheck(t *testing.T) {
	keys := []string{"zone", "rack", "host"}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 9))
		group := make([]claim, 2+rng.IntN(12))
		for i := range group {
			labels := map[string]string{}
			for _, k := range keys {
				if rng.IntN(3) == 0 {
					labels[k] = fmt.Sprint(rng.IntN(3))
				}
			}
			group[i] = claim{id: fmt.Sprint(i), sel: &sluicev1.NodeSelector{MatchLabels: labels}}
		}
		want := make([]bool, len(group))
		for i := range group {
			for j := range group {
				if i != j && CanShareNode(group[i].sel, group[j].sel) {
					want[i] = true
				}
			}
		}
		if got := clashing(group); !slices.Equal(got, want) {
			var sels []map[string]string
			for _, c := range group {
				sels = append(sels, c.sel.GetMatchLabels())
			}
			t.Fatalf("seed %d: selectors %v\n got %v\nwant %v", seed, sels, got, want)
		}
	}
}
