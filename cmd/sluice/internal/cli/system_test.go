package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// startSystem runs sluice dev with n agents and no examples on a fresh data
// directory and a free port, stopped at cleanup.
func startSystem(t *testing.T, agents int) *dev.System {
	t.Helper()
	s, err := dev.Start(context.Background(), dev.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: agents, Stderr: io.Discard,
	})
	if err != nil {
		t.Fatalf("start sluice dev: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// sluice runs the command line against url and returns its exit code and output.
func sluice(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), append([]string{"--server", url}, args...), Streams{Out: &out, Err: &errOut}, "test")
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
	for i, prefix := range []string{"layer2network/bad-vlan: spec.vlan: ", "routingtable/main-copy: spec.tableId: "} {
		if !strings.HasPrefix(lines[i], prefix) {
			t.Errorf("line %d %q, want prefix %q", i, lines[i], prefix)
		}
	}
	if !strings.Contains(lines[2], "nothing was stored") {
		t.Errorf("summary %q does not say nothing was stored", lines[2])
	}
	if _, out, _ := sluice(t, s.URL(), "get", "intents", "-o", "json"); strings.TrimSpace(out) != "[]" {
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
	if !strings.Contains(stdout, "Layer2Network") || !strings.Contains(stdout, "tenant-a") || !strings.Contains(stdout, "cli") {
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

	code, stdout, _ = sluice(t, s.URL(), "get", "rollouts")
	if code != 0 || !strings.Contains(stdout, "Succeeded") || !strings.Contains(stdout, "2/2") {
		t.Errorf("get rollouts:\n%s", stdout)
	}
	_, stdout, _ = sluice(t, s.URL(), "get", "nodes")
	if strings.Count(stdout, "Provisioned") != 2 {
		t.Errorf("get nodes:\n%s", stdout)
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	_ = l.Close()
	code, _, stderr := sluice(t, url, "get", "nodes")
	if code != 1 || !strings.Contains(stderr, "cannot reach NATS at "+url+": is `sluice dev` (make run) running?") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
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

func TestRolloutStatus_RolledBackRecord_ListsItsNodesAndExitsWith3(t *testing.T) {
	s := startSystem(t, 0)
	ctx := context.Background()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := contract.OpenBuckets(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	r := rolledBack()
	r.StartedAt, r.FinishedAt = timestamppb.Now(), timestamppb.Now()
	if _, err := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	fp := &sluicev1.InvalidFingerprint{Fingerprint: fpX, Revision: revB, Rollout: r.GetId(), Node: "node-03", Check: "ping",
		Output: "100% packet loss\nafter 3 tries", Time: timestamppb.Now()}
	if _, err := store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).Create(ctx, fpX, fp); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := sluice(t, s.URL(), "rollout", "status", r.GetId())
	if code != ExitRolledBack {
		t.Fatalf("exit code %d, want %d; stderr %s, stdout:\n%s", code, ExitRolledBack, stderr, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if last := lines[len(lines)-1]; last != "rollout 4-bbbbbbbbbbbb rolled back: 2 nodes failed, budget 0: reverted 5 nodes" {
		t.Errorf("last line %q:\n%s", last, stdout)
	}
	for _, want := range []string{"node-03   invalid", "node-07   timed out", "node-09   skipped", "reverted 5"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = sluice(t, s.URL(), "get", "fingerprints")
	if code != 0 {
		t.Fatalf("get fingerprints: exit %d: %s", code, stderr)
	}
	rows := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(rows) != 2 || strings.Join(strings.Fields(rows[0]), " ") != "FINGERPRINT REVISION ROLLOUT NODE CHECK TIME OUTPUT" {
		t.Fatalf("get fingerprints:\n%s", stdout)
	}
	if got := strings.Fields(rows[1]); len(got) < 7 || got[0] != fpX[:12] || got[1] != revB[:12] || got[2] != r.GetId() ||
		got[3] != "node-03" || got[4] != "ping" || !strings.Contains(rows[1], "100% packet loss after 3 tries") {
		t.Errorf("fingerprint row %q", rows[1])
	}
}
