package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
)

// A rollout baking after its first wave is aborted: the node it touched is
// reverted and the rollout ends ABORTED with who asked and why.
func TestRolloutAbort_RevertsTheTouchedNodesAndEndsAborted(t *testing.T) {
	s := startSystem(t, 3)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("first rollout: exit %d\n%s", code, out)
	}
	changed := strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "b.yaml", changed), "--first-wave", "1", "--bake-time", "1m"); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	// margin: the poll ends as soon as the wave bakes, and the bake lasts a
	// minute, so it cannot be missed.
	natstest.Eventually(t, 45*time.Second, "the first wave to bake", func() bool {
		_, out, _ := sluice(t, s.URL(), "rollout", "status")
		return strings.Contains(out, "baking")
	})
	code, out, stderr := sluice(t, s.URL(), "rollout", "abort", "--reason", "wrong table")
	if code != 0 || !strings.Contains(out, "abort") { // "is aborting", or "aborted" when the revert was quicker than the CLI
		t.Fatalf("abort: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = sluice(t, s.URL(), "rollout", "status", "--watch")
	if code != ExitAborted || !strings.Contains(out, "wrong table") || !strings.Contains(out, "1 node(s) reverted") {
		t.Fatalf("status after abort: exit %d, want %d\n%s", code, ExitAborted, out)
	}
	if code, _, stderr := sluice(t, s.URL(), "rollout", "abort"); code != 1 || !strings.Contains(stderr, "no rollout is running") {
		t.Errorf("abort with nothing running: exit %d: %s", code, stderr)
	}
}

// A config that failed on a node is refused at apply time; once forgiven
// (after the operator fixed the cause) it is rolled out again.
func TestFingerprintForgive_LetsARefusedConfigRollOutAgain(t *testing.T) {
	check := writeFile(t, "check.sh", `#!/bin/sh
if [ "$SLUICE_NODE" = node-02 ] && grep -q '"tableId": *101' "$SLUICE_CONFIG" && [ ! -e "$(dirname "$0")/fixed" ]; then
	echo "ping 10.0.0.1: 100% packet loss"; exit 1
fi
exit 0
`)
	s := startWithCheck(t, 2, check)
	sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA))
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("first rollout: exit %d\n%s", code, out)
	}
	bad := writeFile(t, "b.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1))
	sluice(t, s.URL(), "apply", "-f", bad)
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != ExitRolledBack {
		t.Fatalf("bad rollout: exit %d, want %d\n%s", code, ExitRolledBack, out)
	}
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", bad)
	if code != 1 || !strings.Contains(stderr, "node-02") || !strings.Contains(stderr, "100% packet loss") {
		t.Fatalf("re-apply of the failed config: exit %d, want 1 naming node-02 and the check output:\n%s", code, stderr)
	}
	_, out, _ := sluice(t, s.URL(), "get", "fingerprints")
	fp := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])[0]

	if code, _, stderr := sluice(t, s.URL(), "fingerprint", "forgive", fp); code != 2 || !strings.Contains(stderr, "--reason") {
		t.Errorf("forgive without a reason: exit %d: %s", code, stderr)
	}
	if err := touch(check, "fixed"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = sluice(t, s.URL(), "fingerprint", "forgive", fp, "--reason", "replaced the uplink")
	if code != 0 || !strings.Contains(out, "forgiven") {
		t.Fatalf("forgive: exit %d\n%s%s", code, out, stderr)
	}
	_, out, _ = sluice(t, s.URL(), "get", "fingerprints")
	if !strings.Contains(out, "replaced the uplink") {
		t.Errorf("get fingerprints does not show who forgave it and why:\n%s", out)
	}
	if code, out, stderr := sluice(t, s.URL(), "apply", "-f", bad); code != 0 {
		t.Fatalf("apply after forgive: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout after forgive: exit %d\n%s", code, out)
	}
}

// touch creates the file name next to path.
func touch(path, name string) error {
	return os.WriteFile(filepath.Join(filepath.Dir(path), name), nil, 0o644)
}

// After a rollout rolled back, undo goes back to the revision in force as a
// new rollout; with the head in force, undo goes back one more, marking the
// intents that revision did not have. retry re-runs a rolled-back head on
// purpose.
func TestRolloutUndoAndRetry(t *testing.T) {
	check := writeFile(t, "check.sh", `#!/bin/sh
if [ "$SLUICE_NODE" = node-02 ] && grep -q '"tableId": *101' "$SLUICE_CONFIG"; then
	echo "ping 10.0.0.1: 100% packet loss"; exit 1
fi
exit 0
`)
	s := startWithCheck(t, 2, check)
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, stderr := sluice(t, s.URL(), args...)
		if code != want {
			t.Fatalf("sluice %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, stderr)
		}
		return out + stderr
	}
	tenantB := "---\nkind: Layer2Network\nname: tenant-b\nspec: {vlan: 200, vni: 10200}\n"
	run(0, "apply", "-f", writeFile(t, "a.yaml", tenantA))
	run(0, "rollout", "status", "--watch")
	run(0, "apply", "-f", writeFile(t, "b.yaml", tenantA+tenantB))
	run(0, "rollout", "status", "--watch")

	// A refusal names the flag, and no HTTP code: not "to_revision …
	// (400)".
	if out := run(1, "rollout", "undo", "--to-revision", "abc"); !strings.Contains(out, `--to-revision "abc": give at least 6 characters`) ||
		strings.Contains(out, "(400)") {
		t.Errorf("undo --to-revision abc:\n%s\nwant it refused naming --to-revision, without (400)", out)
	}
	// The head is in force: undo goes back to the revision before it.
	out := run(0, "rollout", "undo")
	if !strings.Contains(out, "layer2network/tenant-b marked for deletion") {
		t.Errorf("undo output:\n%s", out)
	}
	run(0, "rollout", "status", "--watch")
	if out := run(0, "get", "intents"); !strings.Contains(out, "deleting") {
		t.Errorf("tenant-b not marked for deletion:\n%s", out)
	}

	// A bad head rolls back; undo gets out of it with one command.
	run(0, "apply", "-f", writeFile(t, "bad.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1)))
	run(ExitRolledBack, "rollout", "status", "--watch")
	run(1, "apply", "-f", writeFile(t, "bad2.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1))) // refused: known bad
	out = run(0, "rollout", "undo")
	if !strings.Contains(out, "routingtable/mgmt written back") {
		t.Errorf("undo output:\n%s", out)
	}
	run(0, "rollout", "status", "--watch")
	if out := run(0, "get", "intents", "-o", "json"); !strings.Contains(out, `"tableId": 100`) {
		t.Errorf("intents after undo do not hold table 100 again:\n%s", out)
	}

	// retry: the bad revision again, on purpose; it rolls back again.
	run(0, "apply", "-f", writeFile(t, "bad3.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1)), "--retry-invalid")
	run(ExitRolledBack, "rollout", "status", "--watch")
	out = run(0, "rollout", "retry")
	if !strings.Contains(out, "retrying rollout") {
		t.Errorf("retry output:\n%s", out)
	}
	run(ExitRolledBack, "rollout", "status", "--watch")
	// It failed again, so it is recorded again; the events say it was forgiven on purpose first.
	if out := run(0, "events"); !strings.Contains(out, "FingerprintForgiven") || !strings.Contains(out, "retried on purpose") {
		t.Errorf("no FingerprintForgiven event for the retry:\n%s", out)
	}
	everyEventReadable(t, s.URL())
}

// A dry run shows the revision, each changing node with the intents that
// change in it, and the waves; it stores nothing. diff exits as kubectl
// diff: 1 for changes, 0 for none; apply --dry-run 0 when accepted.
func TestDiff_ShowsWhatWouldChangeAndStoresNothing(t *testing.T) {
	s := startSystem(t, 3)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout: %s", out)
	}
	_, before, _ := sluice(t, s.URL(), "get", "revisions", "-o", "json")
	changed := writeFile(t, "b.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1))
	code, out, stderr := sluice(t, s.URL(), "diff", "-f", changed, "--first-wave", "1")
	if code != ExitDiffers {
		t.Fatalf("diff: exit %d, want %d (changes)\n%s%s", code, ExitDiffers, out, stderr)
	}
	for _, want := range []string{"1 updated", "~ routingtable/mgmt", "nodes: 3 present, 3 change, 0 unchanged, 0 refused",
		"3 nodes: node-01 node-02 node-03", "~ routingtable/mgmt spec.tableId: 100 → 101",
		"wave 1: node-01", "wave 2: node-02 node-03", "nothing was stored"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := sluice(t, s.URL(), "apply", "-f", changed, "--dry-run"); code != 0 || !strings.Contains(out, "nothing was stored") {
		t.Errorf("apply --dry-run: exit %d\n%s", code, out)
	}
	code, out, stderr = sluice(t, s.URL(), "diff", "-f", changed, "--first-wave", "1", "-o", "json")
	var r struct {
		Changed bool
		Updated []string
		Nodes   struct{ Present, Change int }
		Changes []struct {
			Node    string
			Wave    int
			Intents []struct {
				Intent, Op string
				Fields     []struct{ Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &r); code != ExitDiffers || err != nil {
		t.Fatalf("diff -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	if !r.Changed || len(r.Updated) != 1 || r.Nodes.Present != 3 || r.Nodes.Change != 3 || len(r.Changes) != 3 ||
		r.Changes[0].Node != "node-01" || r.Changes[0].Wave != 1 || r.Changes[1].Wave != 2 ||
		len(r.Changes[0].Intents) != 1 || r.Changes[0].Intents[0].Op != "changed" ||
		len(r.Changes[0].Intents[0].Fields) != 1 || r.Changes[0].Intents[0].Fields[0].Path != "spec.tableId" {
		t.Errorf("diff -o json: %+v\n%s", r, out)
	}
	if _, after, _ := sluice(t, s.URL(), "get", "revisions", "-o", "json"); after != before {
		t.Errorf("the dry run stored a revision:\nbefore\n%s\nafter\n%s", before, after)
	}
	if code, out, _ := sluice(t, s.URL(), "diff", "-f", writeFile(t, "same.yaml", tenantA)); code != 0 || !strings.Contains(out, "no change") {
		t.Errorf("diff of the head's content: exit %d\n%s", code, out)
	}
}

// compact is b as one line of JSON.
func compact(b []byte) string {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}

// diff fails with 6, never 1 (which says there are changes): an invalid
// intent, NATS unreachable.
func TestDiff_FailureIsNotExitOne(t *testing.T) {
	f := writeFile(t, "a.yaml", tenantA)
	if code, out, stderr := sluice(t, "nats://127.0.0.1:1", "diff", "-f", f); code != ExitDiffFailed || !strings.Contains(stderr, "cannot reach NATS") {
		t.Errorf("diff, NATS unreachable: exit %d, want %d\n%s%s", code, ExitDiffFailed, out, stderr)
	}
	bad := writeFile(t, "bad.yaml", "kind: RoutingTable\nname: x\nspec: {tableId: 254}\n")
	if code, out, stderr := sluice(t, "nats://127.0.0.1:1", "diff", "-f", bad); code != ExitDiffFailed {
		t.Errorf("diff of an invalid intent: exit %d, want %d\n%s%s", code, ExitDiffFailed, out, stderr)
	}
	if code, out, stderr := sluice(t, "nats://127.0.0.1:1", "apply", "--dry-run", "-f", bad); code != 1 {
		t.Errorf("apply --dry-run of an invalid intent: exit %d, want 1\n%s%s", code, out, stderr)
	}
}

// startWithCheck runs sluice dev with agents that run the shell script
// check as their health check.
func startWithCheck(t *testing.T, agents int, check string) *dev.System {
	t.Helper()
	s, err := dev.Start(context.Background(), dev.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: agents, Stderr: io.Discard,
		CheckCmds: []string{"sh " + check}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}
