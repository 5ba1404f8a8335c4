package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// percentile is the nearest-rank p-th percentile of xs (the smallest value
// at least p% of them are at or below), rounded to 2 decimals; 0 for no
// values. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return round2(s[i])
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// parseLoadAvg reads the 1-minute load average from the text of /proc/loadavg
// ("0.52 0.58 0.59 1/389 12345").
func parseLoadAvg(text string) (float64, error) {
	fields := strings.Fields(text)
	if len(fields) < 3 {
		return 0, fmt.Errorf("loadavg %q: want three load averages first", text)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("loadavg %q: the 1-minute load %q is not a load", text, fields[0])
	}
	return v, nil
}

// loadAvg is the machine's 1-minute load average, nil where /proc/loadavg
// cannot be read (not Linux): the BENCH line then leaves it out.
func loadAvg() *float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	v, err := parseLoadAvg(string(b))
	if err != nil {
		return nil
	}
	return &v
}
