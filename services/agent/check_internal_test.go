package agent

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// flaky fails its first fails runs, then passes; with block it waits for
// its context instead of failing.
type flaky struct {
	name  string
	fails int32
	block bool
	runs  atomic.Int32
}

func (f *flaky) Name() string { return f.name }

func (f *flaky) Run(ctx context.Context, _ CheckEnv) (string, error) {
	n := f.runs.Add(1)
	if f.block {
		<-ctx.Done()
		return "still waiting for carrier", ctx.Err()
	}
	if n <= f.fails {
		return "attempt failed", errors.New("no carrier")
	}
	return "ok", nil
}

func TestRunChecks(t *testing.T) {
	tests := []struct {
		name       string
		given      []*flaky
		retries    int
		timeout    time.Duration
		deadline   time.Duration
		wantFailed string // "" = all pass
		wantErr    string
		wantRuns   []int32
	}{
		{name: "all pass", given: []*flaky{{name: "a"}, {name: "b"}}, wantRuns: []int32{1, 1}},
		{name: "first failure stops the rest", given: []*flaky{{name: "a", fails: 9}, {name: "b"}}, wantFailed: "a", wantErr: "no carrier", wantRuns: []int32{1, 0}},
		{name: "retries pass a flaky check", given: []*flaky{{name: "a", fails: 2}}, retries: 2, wantRuns: []int32{3}},
		{name: "retries run out", given: []*flaky{{name: "a", fails: 9}}, retries: 2, wantFailed: "a", wantErr: "3 attempts", wantRuns: []int32{3}},
		{name: "attempt timeout", given: []*flaky{{name: "a", block: true}}, timeout: 20 * time.Millisecond, wantFailed: "a", wantErr: "timed out after 20ms", wantRuns: []int32{1}},
		{name: "overall deadline cuts retries", given: []*flaky{{name: "a", block: true}}, retries: 100, timeout: 30 * time.Millisecond, deadline: 100 * time.Millisecond,
			wantFailed: "a", wantErr: "within their deadline 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := make([]CheckSpec, len(tt.given))
			for i, c := range tt.given {
				specs[i] = CheckSpec{Check: c, Retries: tt.retries, Timeout: tt.timeout}
			}
			deadline := tt.deadline
			if deadline == 0 {
				deadline = 10 * time.Second
			}
			start := time.Now()
			f := runChecks(context.Background(), specs, deadline, time.Millisecond, CheckEnv{}, nil)
			// Margin: the cases take at most their 100ms deadline; 5s only
			// catches a check left running, as the 10s default would be.
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("took %s", took)
			}
			switch {
			case tt.wantFailed == "" && f != nil:
				t.Fatalf("failed %s: %v", f.name, f.err)
			case tt.wantFailed != "" && f == nil:
				t.Fatalf("passed, want %s to fail", tt.wantFailed)
			case f != nil && (f.name != tt.wantFailed || !strings.Contains(f.err.Error(), tt.wantErr) || f.output == ""):
				t.Fatalf("failure %s: %v (output %q), want %s: %s", f.name, f.err, f.output, tt.wantFailed, tt.wantErr)
			}
			for i, want := range tt.wantRuns {
				if got := tt.given[i].runs.Load(); got != want {
					t.Errorf("check %s ran %d times, want %d", tt.given[i].name, got, want)
				}
			}
		})
	}
}

func TestTail_KeepsTheEnd(t *testing.T) {
	if got := tail("short", 10); got != "short" {
		t.Errorf("tail = %q", got)
	}
	if got := tail("0123456789", 4); got != "…6789" {
		t.Errorf("tail = %q", got)
	}
}
