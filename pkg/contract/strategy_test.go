package contract

import (
	"math"
	"slices"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestResolveStrategy_WavesEndAtTheFleetWhateverTheGrowth: waves are
// cumulative, end exactly at the fleet's size and stay finite for a growth
// the configurator would refuse (stored state from elsewhere): huge, NaN,
// infinite.
func TestResolveStrategy_WavesEndAtTheFleetWhateverTheGrowth(t *testing.T) {
	tests := []struct {
		growth float64
		total  int
		want   []int
	}{
		{growth: 2, total: 10, want: []int{1, 3, 7, 10}},
		{growth: 1, total: 3, want: []int{1, 2, 3}},
		{growth: 1e19, total: 10000, want: []int{1, 10000}},
		{growth: math.MaxFloat64, total: 5, want: []int{1, 5}},
		{growth: math.Inf(1), total: 5, want: []int{1, 5}},
		{growth: math.NaN(), total: 5, want: []int{1, 5}},
	}
	for _, tt := range tests {
		p, err := ResolveStrategy(&sluicev1.Strategy{FirstWave: 1, WaveGrowth: tt.growth}, tt.total)
		if err != nil {
			t.Fatalf("growth %g: %v", tt.growth, err)
		}
		if !slices.Equal(p.Waves, tt.want) {
			t.Errorf("growth %g over %d nodes: waves %v, want %v", tt.growth, tt.total, p.Waves, tt.want)
		}
	}
}
