package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// kubectl habits: get KIND NAME picks items, -o name prints kind/name,
// -o wide adds columns and full ids; a name that matches nothing exits 1.
func TestGet_NamesWideAndNameOutputs(t *testing.T) {
	s := startSystem(t, 2)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout: %s", out)
	}

	code, out, stderr := sluice(t, s.URL(), "get", "node", "node-02")
	if code != 0 || !strings.Contains(out, "node-02") || strings.Contains(out, "node-01") {
		t.Errorf("get node node-02: exit %d, want node-02's row only\n%s%s", code, out, stderr)
	}
	code, out, stderr = sluice(t, s.URL(), "get", "nodes", "node-01", "node-09")
	if code != 1 || !strings.Contains(out, "node-01") || !strings.Contains(stderr, `node "node-09" not found`) {
		t.Errorf("get nodes node-01 node-09: exit %d, want node-01 printed, then 1 naming node-09\n%s%s", code, out, stderr)
	}
	if code, out, stderr = sluice(t, s.URL(), "get", "node", "node-0"); code != 1 || out != "" || !strings.Contains(stderr, `node "node-0" not found`) {
		t.Errorf("get node node-0: exit %d, want 1, no table, the error\n%s%s", code, out, stderr)
	}
	if code, out, stderr = sluice(t, s.URL(), "get", "nodes", "-o", "name"); code != 0 || out != "node/node-01\nnode/node-02\n" {
		t.Errorf("get nodes -o name: exit %d\n%q%s", code, out, stderr)
	}
	if code, out, stderr = sluice(t, s.URL(), "get", "intents", "-o", "name"); code != 0 || out != "layer2network/tenant-a\nroutingtable/mgmt\n" {
		t.Errorf("get intents -o name: exit %d\n%q%s", code, out, stderr)
	}
	code, out, stderr = sluice(t, s.URL(), "get", "nodes", "-o", "wide")
	if code != 0 || !strings.Contains(out, "AGENT") || !strings.Contains(out, "OPERATION") || !regexp.MustCompile(`\b[0-9a-f]{64}\b`).MatchString(out) {
		t.Errorf("get nodes -o wide: exit %d, want AGENT, OPERATION and full fingerprints\n%s%s", code, out, stderr)
	}
	if code, out, stderr = sluice(t, s.URL(), "get", "rollouts", "-o", "wide"); code != 0 || !strings.Contains(out, "LEADER-EPOCH") {
		t.Errorf("get rollouts -o wide: exit %d\n%s%s", code, out, stderr)
	}
	_, names, _ := sluice(t, s.URL(), "get", "revisions", "-o", "name")
	id := strings.TrimPrefix(strings.TrimSpace(names), "revision/")
	if code, out, stderr = sluice(t, s.URL(), "get", "revision", id[:8], "-o", "name"); code != 0 || out != "revision/"+id+"\n" {
		t.Errorf("get revision %s (a prefix): exit %d\n%q%s", id[:8], code, out, stderr)
	}
	if code, _, stderr = sluice(t, s.URL(), "get", "nodes", "-o", "tsv"); code != ExitUsage || !strings.Contains(stderr, "table, wide, name, json, yaml") {
		t.Errorf("get nodes -o tsv: exit %d, want %d naming the formats\n%s", code, ExitUsage, stderr)
	}
}

// get --watch lists again when what it lists changes, and ends 0 when
// interrupted.
func TestGet_Watch_ListsAgainOnChange(t *testing.T) {
	s := startSystem(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--server", s.URL(), "get", "rollouts", "--watch"}, Streams{Out: &out, Err: &errOut}, "test", time.Now)
	}()
	time.Sleep(500 * time.Millisecond) // the first listing, empty
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "Succeeded") {
		if time.Now().After(deadline) {
			t.Fatalf("get rollouts --watch never showed the rollout succeed:\n%s%s", out.String(), errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("get --watch interrupted: exit %d, want 0\n%s", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("get --watch did not end when interrupted")
	}
	if n := strings.Count(out.String(), "ID "); n < 2 {
		t.Errorf("get --watch printed %d listings, want the first and at least one more:\n%s", n, out.String())
	}
}
