package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// startSystem runs sluice dev with n agents and no examples on a fresh data
// directory and a free port, stopped at cleanup.
func startSystem(t *testing.T, agents int) *dev.System {
	t.Helper()
	return startSystemWith(t, agents)
}

// sluice runs the command line against url and returns its exit code and output.
func sluice(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return sluiceAt(t, url, time.Time{}, args...)
}

// sluiceAt is sluice with the command's clock stopped at now (the real
// clock when now is zero).
func sluiceAt(t *testing.T, url string, now time.Time, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	clock := time.Now
	if !now.IsZero() {
		clock = func() time.Time { return now }
	}
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"--server", url}, args...), Streams{Out: &out, Err: &errOut}, "test", clock)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const tenantA = `kind: Layer2Network
name: tenant-a
spec: {vlan: 100, vni: 10100}
---
kind: RoutingTable
name: mgmt
spec: {tableId: 100}
`

func TestApply_InvalidIntents_PrintsEveryFieldErrorAndStoresNothing(t *testing.T) {
	s := startSystem(t, 0)
	bad := writeFile(t, "bad.yaml", `kind: Layer2Network
name: bad-vlan
spec: {vlan: 5000, vni: 10100}
---
kind: RoutingTable
name: main-copy
spec: {tableId: 254}
`)
	code, stdout, stderr := sluice(t, s.URL(), "apply", "-f", bad)
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stdout %q stderr %q", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 3 {
		t.Fatalf("want two field errors and a summary, got:\n%s", stderr)
	}
	// Each after where the file declares it, as a parse error says it.
	for i, prefix := range []string{bad + ": document 1 (line 3): layer2network/bad-vlan: spec.vlan: ",
		bad + ": document 2 (line 7): routingtable/main-copy: spec.tableId: "} {
		if !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d %q, want prefix %q", i, lines[i], prefix)
		}
	}
	if !strings.Contains(lines[2], "nothing was stored") {
		t.Errorf("summary %q does not say nothing was stored", lines[2])
	}
	if _, out, _ := sluice(t, s.URL(), "get", "intents", "-o", "json"); !strings.Contains(out, `"items": []`) {
		t.Errorf("intents stored after a rejected apply: %s", out)
	}
}

func TestApply_UnparseableFile_SendsNothing(t *testing.T) {
	s := startSystem(t, 0)
	bad := writeFile(t, "bad.yaml", "kind: Layer2Network\nname: x\nspec: {vlan: [1}\n")
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", bad)
	if code != 1 || !strings.Contains(stderr, "bad.yaml") || !strings.Contains(stderr, "nothing was sent") {
		t.Errorf("exit code %d, stderr:\n%s", code, stderr)
	}
}

func TestApply_PrintsWhatChangedAndTheRevision(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenant-a.yaml", tenantA)

	code, stdout, stderr := sluice(t, s.URL(), "apply", "-f", f, "--max-parallel", "50%")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	for _, want := range []string{"layer2network/tenant-a created\n", "routingtable/mgmt created\n", "(generation 1): rollout starting — watch with: sluice rollout status --watch\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in:\n%s", want, stdout)
		}
	}

	code, stdout, _ = sluice(t, s.URL(), "apply", "-f", f)
	if code != 0 || !strings.Contains(stdout, "layer2network/tenant-a unchanged\n") || !strings.Contains(stdout, "no change: revision ") {
		t.Errorf("second apply: exit %d:\n%s", code, stdout)
	}

	_, stdout, _ = sluice(t, s.URL(), "get", "intents")
	if !strings.Contains(stdout, "Layer2Network") || !strings.Contains(stdout, "tenant-a") || !strings.Contains(stdout, " api ") {
		t.Errorf("get intents:\n%s", stdout)
	}
	_, stdout, _ = sluice(t, s.URL(), "get", "revision")
	if !strings.Contains(stdout, "* (generation 1)") {
		t.Errorf("get revisions does not mark the head:\n%s", stdout)
	}

	code, stdout, stderr = sluice(t, s.URL(), "delete", "layer2network/tenant-a")
	if code != 0 || !strings.Contains(stdout, "layer2network/tenant-a marked for deletion\n") || !strings.Contains(stdout, "(generation 2)") {
		t.Errorf("delete: exit %d:\n%s%s", code, stdout, stderr)
	}

	_, stdout, _ = sluice(t, s.URL(), "events", "--kind", "revision")
	if n := strings.Count(stdout, "HeadMoved"); n != 2 {
		t.Errorf("want 2 HeadMoved events, got %d:\n%s", n, stdout)
	}
}

func TestRolloutStatus_Watch_EndsWithTheOutcome(t *testing.T) {
	s := startSystem(t, 2)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	code, stdout, stderr := sluice(t, s.URL(), "rollout", "status", "--watch")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "rollout 1-") || !strings.Contains(last, " succeeded") {
		t.Errorf("last line %q does not state the outcome:\n%s", last, stdout)
	}
	// Not a terminal: one line per change of the progress, never the same twice in a row.
	prev := ""
	for _, l := range lines {
		if !strings.Contains(l, " 1-") || !strings.Contains(l, "] ") {
			continue // not a progress line
		}
		_, progress, _ := strings.Cut(l, " ") // after the time
		if progress == prev {
			t.Errorf("progress line printed twice in a row: %q\n%s", progress, stdout)
		}
		prev = progress
	}

	code, stdout, _ = sluice(t, s.URL(), "get", "rollouts")
	if code != 0 || !strings.Contains(stdout, "Succeeded") || !strings.Contains(stdout, "2/2") {
		t.Errorf("get rollouts:\n%s", stdout)
	}
	_, stdout, _ = sluice(t, s.URL(), "get", "nodes")
	if strings.Count(stdout, "Provisioned") != 2 {
		t.Errorf("get nodes:\n%s", stdout)
	}
	code, stdout, _ = sluice(t, s.URL(), "rollout", "history")
	if code != 0 || !strings.Contains(stdout, "Succeeded (in force)") || !strings.Contains(stdout, "2/2") {
		t.Errorf("rollout history (exit %d):\n%s", code, stdout)
	}
}

func TestRolloutStatus_NothingApplied_SaysSo(t *testing.T) {
	s := startSystem(t, 0)
	code, _, stderr := sluice(t, s.URL(), "rollout", "status")
	if code != 1 || !strings.Contains(stderr, "no rollouts yet") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}
}

func TestConnect_NothingListening_SaysToStartSluiceDev(t *testing.T) {
	url := "nats://" + testaddr.Held(t)
	code, _, stderr := sluice(t, url, "get", "nodes")
	if code != 1 || !strings.Contains(stderr, "cannot reach NATS at "+url+": is `sluice dev` (make run) running?") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}
	// Under docker-compose one URL is nats-1 alone: the hint says so, not only sluice dev.
	if !strings.Contains(stderr, "Under docker-compose this is nats-1 alone: is it up (docker-compose ps)?") {
		t.Errorf("no docker-compose hint for one server named: %q", stderr)
	}
	// One server named: how to name a cluster's every server (docker-compose's three).
	if !strings.Contains(stderr, "name every server, comma-separated") || !strings.Contains(stderr, "SLUICE_NATS_URL="+composeServers) {
		t.Errorf("no cluster hint for one server named: %q", stderr)
	}
	two := url + ",nats://" + testaddr.Held(t)
	// Two servers named, neither answering: the cluster is down, not sluice dev.
	if _, _, stderr := sluice(t, two, "get", "nodes"); !strings.Contains(stderr, "cannot reach NATS at "+two+": none of its 2 servers answers: is the cluster up") ||
		strings.Contains(stderr, "name every server") || strings.Contains(stderr, "(make run) running") {
		t.Errorf("two servers named: %q", stderr)
	}
}

func TestUsageErrors_ExitWith2(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind to get", []string{"get", "widgets"}, `cannot get "widgets"`},
		{"unknown output", []string{"get", "nodes", "-o", "xml"}, `unknown output format "xml"`},
		{"bad max parallel", []string{"apply", "-f", "x.yaml", "--max-parallel", "0"}, "--max-parallel"},
		{"apply without files", []string{"apply"}, "nothing to apply"},
		{"delete of an unknown kind", []string{"delete", "widget", "x"}, `unknown kind "widget"`},
		{"rollout status: unknown output", []string{"rollout", "status", "-o", "xml"}, `unknown output format "xml"`},
		{"rollout status: --watch with -o json", []string{"rollout", "status", "--watch", "-o", "json"}, "leave out --watch"},
		{"rollout status: two ids", []string{"rollout", "status", "1-a", "2-b"}, "accepts at most 1 arg"},
		{"events: unknown output", []string{"events", "-o", "xml"}, `unknown output format "xml"`},
		{"events: --follow with -o yaml", []string{"events", "--follow", "-o", "yaml"}, "leave out --follow"},
		{"a mistyped command", []string{"aply"}, "unknown command \"aply\" for \"sluice\"\n\nDid you mean this?\n\tapply"},
		{"a mistyped subcommand", []string{"rollout", "statsu"}, "unknown command \"statsu\" for \"sluice rollout\"\n\nDid you mean this?\n\tstatus"},
		{"a subcommand that does not exist", []string{"rollout", "promote"}, "unknown command \"promote\" for \"sluice rollout\"\n\nsluice rollout has: abort, history, pause, resume, retry, status, undo"},
		{"a mistyped subcommand of registry", []string{"registry", "ad"}, "Did you mean this?\n\tadd"},
		{"events: an unknown kind", []string{"events", "--kind", "nodes"}, `--kind "nodes": want one of node, rollout, revision, intent, fingerprint, leader, registry, instance, freeze, gate, control, quarantine`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := sluice(t, "nats://127.0.0.1:1", tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit code %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

// Flag help shows each flag's value as its type: pflag takes a back-quoted
// word of a usage text for the value's name, and --creds showed as
// "--creds sluice creds issue" on every help page.
func TestHelp_FlagValuesAreNamedByTheirType(t *testing.T) {
	code, stdout, stderr := sluice(t, "nats://127.0.0.1:1", "get", "--help")
	if code != 0 || !strings.Contains(stdout, "--creds string ") || strings.Contains(stdout, "--creds sluice") {
		t.Fatalf("get --help: exit %d, want --creds string:\n%s%s", code, stdout, stderr)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: its usage text holds a back quote, which help takes for the value's name: %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk((&app{}).rootCommand())
}

func TestVersionFlag_PrintsAsTheVersionCommand(t *testing.T) {
	code, stdout, stderr := sluice(t, "nats://127.0.0.1:1", "--version")
	if code != 0 || stdout != "sluice test\n" {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, "sluice test\n")
	}
	if code, stdout, _ := sluice(t, "nats://127.0.0.1:1", "version", "--client"); code != 0 || stdout != "sluice test\n" {
		t.Fatalf("version --client: exit %d, stdout %q", code, stdout)
	}
}

// sluice version shows every running service's version, as its micro
// service announces it, and the agents'; NATS unreachable is exit 1 after
// the CLI's own version.
func TestVersion_ShowsTheRunningServices(t *testing.T) {
	s := startSystem(t, 2)
	// The coordinator announces itself once it has a role (leader or
	// standby), the reaper once it has bound its buckets.
	code, stdout, stderr := sluice(t, s.URL(), "version")
	all := func(s string) bool {
		return strings.Contains(s, "sluice-rollout-coordinator") && strings.Contains(s, "sluice-reaper")
	}
	for deadline := time.Now().Add(10 * time.Second); !all(stdout) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		code, stdout, stderr = sluice(t, s.URL(), "version")
	}
	for _, want := range []string{"sluice test\n", "sluice-configurator ", "sluice-rollout-coordinator ", "sluice-reaper ", "sluice-agent ", "2 node(s)"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("version: exit %d, want 0 and %q in\n%s%s", code, want, stdout, stderr)
		}
	}
	if strings.Count(stdout, " dev\n") != 4 { // dev.Options' default version, by each service and the agents
		t.Errorf("version: want the build version dev on every row:\n%s", stdout)
	}
	// As `nats micro ls` shows them: every service announces its build.
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	infos, err := discoverServices(context.Background(), nc)
	if err != nil || len(infos) != 3 {
		t.Fatalf("discover: %v, %d services, want 3", err, len(infos))
	}
	for _, in := range infos {
		if in.Version != "0.0.0-dev" {
			t.Errorf("micro service %s announces version %q, want 0.0.0-dev (the build dev)", in.Name, in.Version)
		}
	}
	code, stdout, stderr = sluice(t, "nats://127.0.0.1:1", "version")
	if code != 1 || stdout != "sluice test\n" || !strings.Contains(stderr, "cannot reach NATS") {
		t.Errorf("version, NATS unreachable: exit %d, want 1 after the CLI's version\n%s%s", code, stdout, stderr)
	}
}

// seed writes hand-made records into a bare server's buckets, as the
// services would have: no service runs to change them.
type seed struct {
	rollouts     []*sluicev1.Rollout
	fingerprints []*sluicev1.InvalidFingerprint
	desired      []*sluicev1.DesiredConfig
	statuses     []*sluicev1.NodeStatus
}

func (sd seed) write(t *testing.T, env *natstest.Env) {
	t.Helper()
	ctx := context.Background()
	b := env.Buckets
	// A desired config is read only if its fingerprint is its config's
	// (pkg/contract/wellformed): a made-up fingerprint stands for the
	// config named after it (fixtureFP), in statuses too.
	for _, d := range sd.desired {
		if d.Config == nil {
			d.Config, d.Fingerprint = fixtureConfig(d.GetFingerprint()), fixtureFP(d.GetFingerprint())
		}
	}
	for _, st := range sd.statuses {
		if st.GetFingerprint() != "" {
			st.Fingerprint = fixtureFP(st.GetFingerprint())
		}
	}
	for _, r := range sd.rollouts {
		if _, err := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.GetId(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range sd.fingerprints {
		if _, err := store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).Create(ctx, f.GetFingerprint(), f); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range sd.desired {
		if _, err := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).Create(ctx, contract.DesiredKey(d.GetNode()), d); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range sd.statuses {
		if _, err := store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Create(ctx, st.GetNode(), st); err != nil {
			t.Fatal(err)
		}
	}
}

// fixtureConfig is the config a test's made-up fingerprint fp stands for.
func fixtureConfig(fp string) *sluicev1.NodeConfig {
	return &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: "fixture-" + fp}}}
}

// fixtureFP is the real fingerprint of fixtureConfig(fp).
func fixtureFP(fp string) string { return render.Fingerprint(fixtureConfig(fp)) }

const (
	fpBackup = "dddddddddddd4444444444444444444444444444444444444444444444444444"
	fpOther  = "eeeeeeeeeeee5555555555555555555555555555555555555555555555555555"
)

func TestRolloutStatus_RolledBackRecord_ListsItsNodesAndExitsWith3(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	r := rolledBack()
	r.StartedAt, r.FinishedAt = timestamppb.Now(), timestamppb.Now()
	fp := &sluicev1.InvalidFingerprint{Fingerprint: fpX, Revision: revB, Rollout: r.GetId(), Node: "node-03", Check: "ping",
		Output: "100% packet loss\nafter 3 tries", Time: timestamppb.Now()}
	seed{
		rollouts: []*sluicev1.Rollout{r}, fingerprints: []*sluicev1.InvalidFingerprint{fp},
		desired: []*sluicev1.DesiredConfig{
			// The failed node is back on its backup; another node is still reverting.
			{Node: "node-03", Rollout: r.GetId(), Fingerprint: fpBackup, Revert: true},
			// margin: "5h ago" holds for the hour after this is written.
			{Node: "node-04", Rollout: r.GetId(), Fingerprint: fpBackup, Revert: true, WrittenAt: timestamppb.New(time.Now().Add(-5 * time.Hour))},
			// A node of an older rollout is not this rollout's business.
			{Node: "node-05", Rollout: "3-aaaaaaaaaaaa", Fingerprint: fpOther},
			// A node of this rollout put back on its backup.
			{Node: "node-06", Rollout: r.GetId(), Fingerprint: fpBackup, Revert: true},
		},
		statuses: []*sluicev1.NodeStatus{
			{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpBackup},
			{Node: "node-04", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpX},
			{Node: "node-05", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING, Fingerprint: fpOther},
			{Node: "node-06", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpBackup},
		},
	}.write(t, env)

	code, stdout, stderr := sluice(t, env.URL, "rollout", "status", r.GetId())
	if code != ExitRolledBack {
		t.Fatalf("exit code %d, want %d; stderr %s, stdout:\n%s", code, ExitRolledBack, stderr, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; last != "rollout 4-bbbbbbbbbbbb rolled back: 2 nodes failed, budget 0: reverted 5 nodes" {
		t.Errorf("last line %q:\n%s", last, stdout)
	}
	var table []string
	for i, l := range lines {
		if l == "nodes that did not simply succeed:" {
			table = lines[i+1 : len(lines)-1]
		}
	}
	want := [][]string{
		{"NODE", "RESULT", "CHECK", "MESSAGE"},
		{"node-03", "invalid,", "reverted", "ping", "10.0.0.1", "unreachable", "|", "output:", "100%", "packet", "loss"},
		{"node-07", "timed", "out", "deadline", "no", "final", "report", "within", "the", "apply", "deadline", "5m0s"},
		{"node-09", "skipped", "-", "left", "during", "the", "rollout", "(not", "a", "failure)"},
		{"node-04", "reverting", "-", "backup", fixtureFP(fpBackup)[:12], "written", "5h", "ago;", "the", "agent", "has", "not", "acknowledged", "it"},
		{"node-06", "reverted", "-", "backup", fixtureFP(fpBackup)[:12], "is", "in", "force", "again"},
	}
	if len(table) != len(want) {
		t.Fatalf("node table has %d lines, want %d:\n%s", len(table), len(want), stdout)
	}
	for i, w := range want {
		if got := strings.Fields(table[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("node table line %d:\n got %q\nwant %q", i, got, w)
		}
	}
	for _, want := range []string{"(1 timed out), skipped 0, reverting 0, reverted 5", "strategy  max parallel 2, failure budget 0 (default)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = sluice(t, env.URL, "get", "fingerprints")
	if code != 0 {
		t.Fatalf("get fingerprints: exit %d: %s", code, stderr)
	}
	rows := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(rows) != 2 || strings.Join(strings.Fields(rows[0]), " ") != "FINGERPRINT REVISION ROLLOUT NODE CAUSE CHECK TIME FORGIVEN OUTPUT" {
		t.Fatalf("get fingerprints:\n%s", stdout)
	}
	if got := strings.Fields(rows[1]); len(got) < 8 || got[0] != fpX[:12] || got[1] != revB[:12] || got[2] != r.GetId() ||
		got[3] != "node-03" || got[4] != "check-failed" || got[5] != "ping" || !strings.Contains(rows[1], "100% packet loss after 3 tries") {
		t.Errorf("fingerprint row %q", rows[1])
	}
	for _, format := range []string{formatJSON, formatYAML} {
		code, stdout, stderr = sluice(t, env.URL, "get", "fingerprints", "-o", format)
		if code != 0 {
			t.Fatalf("get fingerprints -o %s: exit %d: %s", format, code, stderr)
		}
		got := decodeList(t, format, []byte(stdout), func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
		if len(got) != 1 || !proto.Equal(got[0], fp) {
			t.Errorf("get fingerprints -o %s = %v, want [%v]", format, got, fp)
		}
	}
}

func TestRolloutStatus_Progressing_ListsTheNodesOnTheirWayAndExits0(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	started := timestamppb.New(time.Now().Add(-5 * time.Hour)) // margin: "5h" holds for the hour after this
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Reason: "head moved to generation 5",
		Strategy:  &sluicev1.Strategy{FirstWave: 1, FailureBudget: "1"},
		StartedAt: started, Wave: 2, Counts: &sluicev1.RolloutCounts{Total: 5, Pending: 1, InProgress: 2, Provisioned: 1, Failed: 1},
		Failures: []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "ping", Message: "unreachable"}},
	}
	seed{
		rollouts: []*sluicev1.Rollout{r},
		desired: []*sluicev1.DesiredConfig{
			{Node: "node-01", Rollout: r.GetId(), Fingerprint: fpX},
			{Node: "node-02", Rollout: r.GetId(), Fingerprint: fpX},
			{Node: "node-03", Rollout: r.GetId(), Fingerprint: fpX, WrittenAt: started},
			{Node: "node-04", Rollout: r.GetId(), Fingerprint: fpX},
		},
		statuses: []*sluicev1.NodeStatus{
			{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Fingerprint: fpX, FailedCheck: "ping"},
			{Node: "node-02", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpX},
			{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpOther},
			{Node: "node-04", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING, Fingerprint: fpX, ApplyStartedAt: started},
		},
	}.write(t, env)

	code, stdout, stderr := sluice(t, env.URL, "rollout", "status")
	if code != ExitSucceeded {
		t.Fatalf("exit code %d, want %d; stderr %s, stdout:\n%s", code, ExitSucceeded, stderr, stdout)
	}
	words := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"strategy max parallel 1 (default), waves from 1 growing ×2 (default), failure budget 1",
		"stage wave 2",
		"node-01 invalid ping unreachable",
		"node-03 in progress - written 5h ago; the agent has not acknowledged it",
		"node-04 in progress - applying for 5h",
	} {
		if !strings.Contains(words, want) {
			t.Errorf("missing %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "node-02") {
		t.Errorf("a provisioned node is listed:\n%s", stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; last != "rollout 5-bbbbbbbbbbbb is progressing: head moved to generation 5" {
		t.Errorf("last line %q", last)
	}
}

// A rollout that stopped with a node in flight counts it: its operations
// add up to those attempted, and the node is named (sluice issue 42 item 3:
// "operations 5 attempted: 0 in progress, 3 completed, 1 failed, 0
// cancelled", and "stopped in flight 1" named no node).
func TestRolloutStatus_StoppedInFlight_CountedAndNamed(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	started := timestamppb.New(time.Now().Add(-5 * time.Hour)) // margin: "5h" holds for the hour after this
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, Reason: "node-01 failed check ping",
		Strategy: &sluicev1.Strategy{MaxParallel: "2"}, StartedAt: started,
		Counts:   &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Stopped: 1, Attempted: 5, Reverting: 5},
		Failures: []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "ping", Message: "unreachable"}},
	}
	seed{
		rollouts: []*sluicev1.Rollout{r},
		desired:  []*sluicev1.DesiredConfig{{Node: "node-04", Rollout: r.GetId(), Fingerprint: fpX}},
		statuses: []*sluicev1.NodeStatus{{Node: "node-04", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING, Fingerprint: fpX, ApplyStartedAt: started}},
	}.write(t, env)

	code, stdout, stderr := sluice(t, env.URL, "rollout", "status")
	if code != ExitSucceeded {
		t.Fatalf("exit code %d, want %d; stderr %s, stdout:\n%s", code, ExitSucceeded, stderr, stdout)
	}
	words := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"pending 0, in progress 0, provisioned 3, failed 1, skipped 0, stopped in flight 1, not started 0, reverting 5, reverted 0",
		"operations 5 attempted: 0 in progress, 3 completed, 1 failed, 0 cancelled at their deadline, 1 stopped in flight",
		"node-04 stopped in flight - no outcome of its own: applying for 5h",
	} {
		if !strings.Contains(words, want) {
			t.Errorf("missing %q:\n%s", want, stdout)
		}
	}
}

func TestRolloutStatus_JSONAndYAML_PrintTheRecordAndKeepTheExitCode(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	older := &sluicev1.Rollout{Id: "3-aaaaaaaaaaaa", Revision: revA, Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		StartedAt: timestamppb.New(time.Now().Add(-time.Hour))}
	r := rolledBack()
	r.StartedAt, r.FinishedAt = timestamppb.Now(), timestamppb.Now()
	seed{
		rollouts: []*sluicev1.Rollout{older, r},
		// A live node of the rollout: the table lists it, the record does not hold it.
		desired: []*sluicev1.DesiredConfig{{Node: "node-04", Rollout: r.GetId(), Fingerprint: fpBackup, Revert: true}},
	}.write(t, env)
	tests := []struct {
		name     string
		args     []string
		want     *sluicev1.Rollout
		wantCode int
	}{
		{"the newest rollout", nil, r, ExitRolledBack},
		{"a rollout by id", []string{older.GetId()}, older, ExitSucceeded},
	}
	for _, tt := range tests {
		for _, format := range []string{formatJSON, formatYAML} {
			t.Run(tt.name+" -o "+format, func(t *testing.T) {
				code, stdout, stderr := sluice(t, env.URL, append([]string{"rollout", "status", "-o", format}, tt.args...)...)
				if code != tt.wantCode {
					t.Fatalf("exit code %d, want %d; stderr %s", code, tt.wantCode, stderr)
				}
				got := decodeList(t, format, []byte(stdout), func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
				if len(got) != 1 || !proto.Equal(got[0], tt.want) {
					t.Errorf("items = %v, want [%v]:\n%s", got, tt.want, stdout)
				}
			})
		}
	}
}

func TestRolloutStatus_JSON_HeadNotStartedYet_IsAnEmptyListAndSaysSoOnStderr(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seed{rollouts: []*sluicev1.Rollout{{Id: "3-aaaaaaaaaaaa", Revision: revA, Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}}}.write(t, env)
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	if _, err := heads.Create(context.Background(), contract.KeyHead, &sluicev1.Head{Revision: revB, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := sluice(t, env.URL, "rollout", "status", "-o", "json")
	if code != ExitSucceeded || stdout != "{\n  \"items\": [],\n  \"unreadable\": []\n}\n" || !strings.Contains(stderr, "its rollout has not started yet") {
		t.Errorf("exit code %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestRolloutStatus_Watch_FollowsRevertingToRolledBackAndExitsWith3(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	r := rolledBack()
	r.Phase, r.Reason, r.FinishedAt = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, "node-03 failed check ping: 10.0.0.1 unreachable", nil
	r.Counts.Reverting, r.Counts.Reverted = 5, 0
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, env)

	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), []string{"--server", env.URL, "rollout", "status", "--watch", r.GetId()}, Streams{Out: &out, Err: &errOut}, "test")
	}()
	// margin: the poll ends as soon as the watch printed it.
	natstest.Eventually(t, 30*time.Second, "the watch to show the reverting rollout", func() bool { return strings.Contains(out.String(), "Reverting") })
	select {
	case code := <-done:
		t.Fatalf("watch ended with %d while the rollout was reverting:\n%s%s", code, out.String(), errOut.String())
	default:
	}

	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if _, err := rollouts.Mutate(context.Background(), r.GetId(), func(cur *sluicev1.Rollout) (*sluicev1.Rollout, error) {
		cur.Phase, cur.Reason, cur.FinishedAt = sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, "node-03 failed check ping: 10.0.0.1 unreachable; reverted 5 nodes", timestamppb.Now()
		cur.Counts.Reverting, cur.Counts.Reverted = 0, 5
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != ExitRolledBack {
			t.Errorf("exit code %d, want %d; stderr %s", code, ExitRolledBack, errOut.String())
		}
	case <-time.After(30 * time.Second): // margin: the watch ends as soon as it sees the outcome
		t.Fatalf("watch did not end after the rollout rolled back:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "rollout 4-bbbbbbbbbbbb rolled back: node-03 failed check ping: 10.0.0.1 unreachable; reverted 5 nodes" {
		t.Errorf("last line %q:\n%s", last, out.String())
	}
}
