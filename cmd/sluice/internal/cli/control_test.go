package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/pkg/natstest"
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
	natstest.Eventually(t, 10*time.Second, "the first wave to bake", func() bool {
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
	s, err := dev.Start(context.Background(), dev.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: 2, Stderr: io.Discard,
		CheckCmds: []string{"sh " + check}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
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
