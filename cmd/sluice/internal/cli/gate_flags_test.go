package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A --gate that does not parse, or that the strategy rules refuse, is a
// usage error naming --gate and what is wrong, before anything is sent.
func TestApplyFlags_GateErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no kind", []string{"--gate", "error-rate=http://prom:9090?query=x&max=0.01"},
			`--gate "error-rate=http://prom:9090?query=x&max=0.01": gate error-rate: "http" is not a gate kind`},
		{"a threshold that is not a number", []string{"--gate", "error-rate=prometheus:http://prom:9090?query=x&max=one"},
			`gate error-rate: max=one: want a number like 0.01`},
		{"no threshold", []string{"--gate", "error-rate=prometheus:http://prom:9090?query=x"},
			`--gate: gate error-rate: no threshold: set max=`},
		{"two gates of one name", []string{"--gate", "e=prometheus:http://p?query=x&max=1", "--gate", "e=prometheus:http://p?alert=A"},
			`--gate: gate e: name "e": two gates have it`},
		{"too many samples for the lookback", []string{"--gate", "e=prometheus:http://p?query=x&max=1&lookback=30s&step=10s&min-samples=9"},
			`--gate: gate e: min-samples 9: a lookback of 30s at a step of 10s has at most 4`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f strategyFlags
			fs := pflag.NewFlagSet("apply", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			_, err := f.strategy(fs)
			var ee *ExitError
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v; want one containing %q", err, tt.wantErr)
			}
			if !errors.As(err, &ee) || ee.Code != ExitUsage {
				t.Fatalf("error %v is not a usage error", err)
			}
		})
	}
}

func TestApplyFlags_GatesSetTheStrategy(t *testing.T) {
	var f strategyFlags
	fs := pflag.NewFlagSet("apply", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse([]string{"--first-wave", "1", "--gate", "error-rate=prometheus:http://prom:9090?query=sum(rate(e[1m]))+0&max=0.01&min-samples=5",
		"--gate", "links=prometheus:http://prom:9090?alert=LinkDown"}); err != nil {
		t.Fatal(err)
	}
	st, err := f.strategy(fs)
	if err != nil || len(st.GetGates()) != 2 || st.GetGates()[0].GetQuery() != "sum(rate(e[1m]))+0" || st.GetGates()[1].GetAlerts()[0] != "LinkDown" {
		t.Fatalf("strategy %v, %v", st, err)
	}
	if line := strategyLine(st); !strings.Contains(line, "gate error-rate: sum(rate(e[1m]))+0 <= 0.01 over 5m0s (at least 5 samples)") ||
		!strings.Contains(line, "gate links: alerts LinkDown not firing") {
		t.Fatalf("strategy line %q does not describe the gates", line)
	}
}

// rollout status says what a gate holds the rollout for, until when it
// gives up, and which gate stopped it with its query, value and threshold.
func TestRolloutLines_Gates(t *testing.T) {
	r := &sluicev1.Rollout{Wave: 1, Waiting: "waiting for gate error-rate: 2 of 5 samples over 5m0s",
		WaitingUntil: timestamppb.New(now.Add(8*time.Minute + 10*time.Second))}
	if got, want := stageLine(r, now), "wave 1, waiting for gate error-rate: 2 of 5 samples over 5m0s (fails in 8m)"; got != want {
		t.Errorf("stageLine = %q, want %q", got, want)
	}
	r.BlockedBy = &sluicev1.GateResult{Gate: "error-rate", Verdict: "failed", Message: "error-rate: 0.031 > 0.01 over 5m0s",
		Query: "job:errors:ratio", Value: 0.031, Comparison: "<=", Threshold: 0.01}
	r.Gates = []*sluicev1.GateResult{r.BlockedBy}
	r.Gates[0].Before, r.Gates[0].At = "wave 2", timestamppb.New(now.Add(-time.Minute))
	got := strings.Join(gateLines(r, now), "\n")
	for _, want := range []string{"gate      error-rate: 0.031 > 0.01 over 5m0s (failed before wave 2, 1m ago)",
		"blocked   by gate error-rate: 0.031 > 0.01 over 5m0s; query job:errors:ratio must be <= 0.01, was 0.031"} {
		if !strings.Contains(got, want) {
			t.Errorf("gate lines\n%s\nwant a line %q", got, want)
		}
	}
}
