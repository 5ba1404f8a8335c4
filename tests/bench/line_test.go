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

// TestResult_Line_ZeroCounts: a count whose healthy value is 0 is printed
// as 0, not left out (a missing figure reads as "not measured"); a figure
// not measured in this run is left out.
func TestResult_Line_ZeroCounts(t *testing.T) {
	zero, load := 0, 0.52
	tests := []struct {
		name        string
		given       Result
		wantPresent map[string]any
		wantAbsent  []string
	}{
		{name: "no pauses: no false_takeovers; load unreadable: no load",
			given:       Result{Nodes: 10},
			wantPresent: map[string]any{"presence_lost": 0.0, "presence_writes_per_s_per_1k": 0.0},
			wantAbsent:  []string{"false_takeovers", "false_takeover_pauses", "load_avg_start", "load_avg_end", "clean_takeover_ms"}},
		{name: "pauses without a takeover: false_takeovers 0",
			given:       Result{Nodes: 10, FalseTakeovers: &zero, FalseTakeoverPauses: 3, LoadAvgStart: &load, LoadAvgEnd: &load},
			wantPresent: map[string]any{"false_takeovers": 0.0, "false_takeover_pauses": 3.0, "load_avg_start": 0.52, "load_avg_end": 0.52}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, err := tt.given.Line()
			if err != nil {
				t.Fatalf("Line(): %v", err)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "BENCH ")), &got); err != nil {
				t.Fatalf("Line() = %q: %v", line, err)
			}
			for k, want := range tt.wantPresent {
				if v, ok := got[k]; !ok || v != want {
					t.Errorf("%s = %v (present %v), want %v: %s", k, v, ok, want, line)
				}
			}
			for _, k := range tt.wantAbsent {
				if v, ok := got[k]; ok {
					t.Errorf("%s = %v, want it left out: %s", k, v, line)
				}
			}
		})
	}
}
