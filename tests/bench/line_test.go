package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestResult_Line: the BENCH line is always one valid JSON object; with no
// apply latency there is no ideal, and no ratio (it was +Inf, and the
// bench printed "BENCH " with nothing after it and exited 0).
func TestResult_Line(t *testing.T) {
	tests := []struct {
		name      string
		given     Result
		wantRatio bool
		wantErr   bool
	}{
		{name: "apply_ms 0: no ideal, no ratio", given: Result{Nodes: 10, MaxParallel: 5, WallMS: 12.5,
			OverheadRatio: overheadRatio(12.5, 0)}},
		{name: "an ideal: the ratio", given: Result{Nodes: 10, MaxParallel: 5, ApplyMS: 100, WallMS: 210, IdealMS: 200,
			OverheadRatio: overheadRatio(210, 200)}, wantRatio: true},
		{name: "a figure JSON cannot carry is an error, not an empty line", given: Result{WallMS: math.Inf(1)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, err := tt.given.Line()
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Line() = %q, want an error", line)
				}
				return
			}
			if err != nil {
				t.Fatalf("Line(): %v", err)
			}
			js, ok := strings.CutPrefix(line, "BENCH ")
			var got map[string]any
			if !ok || json.Unmarshal([]byte(js), &got) != nil {
				t.Fatalf("Line() = %q, want BENCH and a JSON object", line)
			}
			ratio, has := got["overhead_ratio"]
			if has != tt.wantRatio {
				t.Fatalf("overhead_ratio present = %v (%v), want %v: %s", has, ratio, tt.wantRatio, line)
			}
			if tt.wantRatio && ratio != 1.05 {
				t.Errorf("overhead_ratio = %v, want 210/200 = 1.05", ratio)
			}
			if got["wall_ms"] != tt.given.WallMS {
				t.Errorf("wall_ms = %v, want %v", got["wall_ms"], tt.given.WallMS)
			}
		})
	}
}
