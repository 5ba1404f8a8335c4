package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestApply_StrategyFlagsReachTheHead(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenant-a.yaml", tenantA)
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", f, "--max-parallel", "5", "--first-wave", "2", "--wave-growth", "3",
		"--bake-time", "30s", "--failure-domain", "zone", "--failure-budget", "10%", "--apply-deadline", "2m",
		"--pickup-deadline", "4m", "--progress-deadline", "2h", "--retry-invalid", "--max-unproven-domains", "2",
		"--bake-checks", "3", "--bake-check-interval", "10s")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	st := headStrategy(t, s.URL())
	if st.GetMaxParallel() != "5" || st.GetFirstWave() != 2 || st.GetWaveGrowth() != 3 || st.GetBakeTime().AsDuration() != 30*time.Second ||
		st.GetFailureDomain() != "zone" || st.GetFailureBudget() != "10%" || st.GetApplyDeadline().AsDuration() != 2*time.Minute ||
		st.GetPickupDeadline().AsDuration() != 4*time.Minute || st.GetProgressDeadline().AsDuration() != 2*time.Hour || !st.GetRetryInvalid() || st.GetMaxUnprovenDomains() != 2 ||
		st.GetBakeChecks() != 3 || st.GetBakeCheckInterval().AsDuration() != 10*time.Second {
		t.Fatalf("head strategy = %v", st)
	}
}

func TestStrategyFlags_BadValues_AreUsageErrorsNamingTheFlag(t *testing.T) {
	tests := []struct {
		name  string
		given []string
		want  []string // in the error, in order
	}{
		{"duration that does not parse", []string{"--apply-deadline", "soon"}, []string{`invalid argument "soon" for "--apply-deadline"`}},
		{"duration without a unit", []string{"--bake-time", "30", "--first-wave", "1"}, []string{`"--bake-time"`, "missing unit"}},
		{"wave growth not a number", []string{"--wave-growth", "fast"}, []string{`"--wave-growth"`}},
		{"negative first wave", []string{"--first-wave", "-1"}, []string{`"--first-wave"`}},
		{"max parallel zero", []string{"--max-parallel", "0"}, []string{`--max-parallel: "0" is not a count of at least 1`}},
		{"wave growth without waves", []string{"--wave-growth", "3"}, []string{"--wave-growth: applies to waves; set --first-wave too"}},
		{"wave growth below one", []string{"--first-wave", "2", "--wave-growth", "0.5"}, []string{"--wave-growth: 0.5 would shrink the waves"}},
		{"wave growth whose waves would overflow", []string{"--first-wave", "1", "--wave-growth", "1e19"}, []string{"--wave-growth: 1e+19 is too large; it must be from 1 to 100"}},
		{"bake time without stages", []string{"--bake-time", "1m"}, []string{"--bake-time: bake time applies between waves or failure domains; set --first-wave or --failure-domain"}},
		{"negative bake time", []string{"--first-wave", "1", "--bake-time", "-1s"}, []string{"--bake-time: -1s is not a duration of zero or more"}},
		{"failure domain with a space", []string{"--failure-domain", "my zone"}, []string{`--failure-domain: "my zone" is not a label key`}},
		{"bake checks without a bake", []string{"--first-wave", "1", "--bake-checks", "2"}, []string{"--bake-checks: checks are re-run while nodes bake; set --bake-time too"}},
		{"max unproven domains without a failure domain", []string{"--max-unproven-domains", "2"}, []string{"--max-unproven-domains: limits failure-domain values in progress at once; set --failure-domain too"}},
		{"failure budget over 100%", []string{"--failure-budget", "101%"}, []string{`--failure-budget: "101%" is not a percentage`}},
		{"failure budget in words", []string{"--failure-budget", "few"}, []string{`--failure-budget: "few"`}},
		{"zero apply deadline", []string{"--apply-deadline", "0s"}, []string{"--apply-deadline: 0s is not a positive duration"}},
		{"negative progress deadline", []string{"--progress-deadline", "-5m"}, []string{"--progress-deadline: -5m0s is not a positive duration"}},
		{"pickup shorter than apply", []string{"--apply-deadline", "2m", "--pickup-deadline", "1m"},
			[]string{"--pickup-deadline: 1m0s is shorter than the apply deadline 2m0s"}},
		{"gate without a kind", []string{"--gate", "e=http://p:9090?query=x&max=1"}, []string{`--gate "e=http://p:9090?query=x&max=1": gate e: "http" is not a gate kind`}},
		{"gates file that is not there", []string{"--gates-file", "/nonexistent/gates.yaml"}, []string{"--gates-file: open /nonexistent/gates.yaml"}},
		{"gate without a threshold", []string{"--gate", "e=prometheus:http://p:9090?query=x"}, []string{"--gate: gate e: no threshold"}},
		{"every problem at once", []string{"--max-parallel", "0%", "--failure-budget", "-1"}, []string{"2 strategy flags are wrong:\n  --failure-budget: ", "\n  --max-parallel: "}},
	}
	for _, tt := range tests {
		for _, command := range [][]string{{"apply", "-f", "x.yaml"}, {"delete", "routingtable/mgmt"}} {
			t.Run(command[0]+"/"+tt.name, func(t *testing.T) {
				// Nothing listens on port 1: the flags are checked before connecting.
				code, stdout, stderr := sluice(t, "nats://127.0.0.1:1", append(command, tt.given...)...)
				if code != 2 || stdout != "" {
					t.Fatalf("exit code %d, stdout %q, stderr %q; want a usage error", code, stdout, stderr)
				}
				at := 0
				for _, w := range tt.want {
					i := strings.Index(stderr[at:], w)
					if i < 0 {
						t.Fatalf("stderr %q lacks %q (in order)", stderr, w)
					}
					at += i + len(w)
				}
			})
		}
	}
}

func TestApply_GatesFile_ReachesTheHeadWithTheGateFlags(t *testing.T) {
	s := startSystem(t, 0)
	gates := writeFile(t, "gates.yaml", `gates:
- name: error-rate
  prometheus: http://prom:9090
  query: sum(rate(http_errors_total[1m]))
  max: 0.01
  lookback: 5m
  minSamples: 5
- name: links
  prometheus: http://prom:9090
  alerts: [LinkDown]
`)
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "tenant-a.yaml", tenantA), "--gates-file", gates,
		"--gate", "latency=prometheus:http://prom:9090?query=p99&max=0.2")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	var got []string
	for _, g := range headStrategy(t, s.URL()).GetGates() {
		got = append(got, contract.FormatGate(g))
	}
	want := []string{
		"error-rate=prometheus:http://prom:9090?query=sum(rate(http_errors_total[1m]))&max=0.01&lookback=5m0s&min-samples=5",
		"links=prometheus:http://prom:9090?alert=LinkDown",
		"latency=prometheus:http://prom:9090?query=p99&max=0.2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("head's gates:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestApply_GatesFile_BadGate_IsAUsageErrorNamingFileGateAndField(t *testing.T) {
	gates := writeFile(t, "gates.yaml", "gates:\n- name: error-rate\n  prometheus: http://prom:9090\n  query: x\n  max: 1\n  lookback: soon\n")
	code, stdout, stderr := sluice(t, "nats://127.0.0.1:1", "apply", "-f", "x.yaml", "--gates-file", gates)
	if want := `--gates-file ` + gates + `: gates[0] (error-rate): lookback "soon": want a duration like 5m or 90s`; code != 2 || stdout != "" || !strings.Contains(stderr, want) {
		t.Fatalf("exit code %d, stdout %q, stderr %q; want a usage error with %q", code, stdout, stderr, want)
	}
}

func TestStrategyFlags_EveryStrategyFieldHasTheFlagItsErrorsName(t *testing.T) {
	var sf strategyFlags
	fs := pflag.NewFlagSet("apply", pflag.ContinueOnError)
	sf.register(fs)
	fields := (&sluicev1.Strategy{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		flag := flagOf("strategy." + name)
		if fs.Lookup(strings.TrimPrefix(flag, "--")) == nil {
			t.Errorf("strategy.%s: no flag %s", name, flag)
		}
	}
	// --gates-file sets strategy.gates too, from a file.
	if fields.Len()+1 != countFlags(fs) {
		t.Errorf("%d strategy fields, %d flags (one more: --gates-file)", fields.Len(), countFlags(fs))
	}
}

func countFlags(fs *pflag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*pflag.Flag) { n++ })
	return n
}

func TestDelete_StrategyFlagsReachTheHead(t *testing.T) {
	s := startSystem(t, 0)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "tenant-a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: exit code %d: %s", code, stderr)
	}
	if st := headStrategy(t, s.URL()); st != nil {
		t.Fatalf("apply without strategy flags: head strategy = %v, want none (the defaults)", st)
	}
	code, _, stderr := sluice(t, s.URL(), "delete", "routingtable/mgmt", "--failure-domain", "rack", "--bake-time", "0s", "--progress-deadline", "30m")
	if code != 0 {
		t.Fatalf("delete: exit code %d: %s", code, stderr)
	}
	st := headStrategy(t, s.URL())
	if st.GetFailureDomain() != "rack" || st.GetBakeTime() == nil || st.GetBakeTime().AsDuration() != 0 ||
		st.GetProgressDeadline().AsDuration() != 30*time.Minute || st.GetApplyDeadline() != nil {
		t.Fatalf("head strategy = %v", st)
	}
	code, _, stderr = sluice(t, s.URL(), "delete", "routingtable/mgmt", "--pickup-deadline", "-")
	if code != 2 || !strings.Contains(stderr, "pickup-deadline") {
		t.Fatalf("exit code %d, stderr %q; want a usage error naming --pickup-deadline", code, stderr)
	}
}

// headStrategy reads the strategy of revisions/head.
func headStrategy(t *testing.T, url string) *sluicev1.Strategy {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), contract.BucketRevisions)
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.New(kv, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	return h.Value.GetStrategy()
}
