package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// describe node shows the node's presence, status, desired config and
// backup with their revisions, and its last events; -o json the stored
// objects; an unknown node is an error naming it.
func TestDescribeNode(t *testing.T) {
	s := startSystem(t, 2)
	first := writeFile(t, "a.yaml", tenantA)
	second := writeFile(t, "b.yaml", strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1))
	for _, f := range []string{first, second} {
		if code, _, stderr := sluice(t, s.URL(), "apply", "-f", f, "--max-parallel", "2"); code != 0 {
			t.Fatalf("apply: exit %d: %s", code, stderr)
		}
		if code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
			t.Fatalf("rollout status --watch: exit %d: %s%s", code, out, stderr)
		}
	}

	code, out, stderr := sluice(t, s.URL(), "describe", "node", "node-01")
	if code != 0 {
		t.Fatalf("describe node: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Node:", "node-01", "Present:", "yes, agent", "Labels:", "Status:", "Provisioned", "Desired:",
		"Backup:", "proven on this node", "Operation:", "Events (the last 10", "NodeProvisioned"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe node: no %q in\n%s", want, out)
		}
	}

	code, out, stderr = sluice(t, s.URL(), "describe", "node", "node-01", "-o", "json")
	var obj map[string]json.RawMessage
	if code != 0 || json.Unmarshal([]byte(out), &obj) != nil {
		t.Fatalf("describe node -o json: exit %d, %s%s", code, out, stderr)
	}
	for _, k := range []string{"node", "presence", "status", "desired", "backup", "unreadable"} {
		if v, ok := obj[k]; !ok || (k != "unreadable" && string(v) == "null") {
			t.Errorf("-o json: %q is %s; want it set in\n%s", k, v, out)
		}
	}
	// As every -o json: 64-bit integers as numbers (the desired config's
	// leaderEpoch was "1"), a phase with its word.
	var parts struct {
		Desired struct {
			LeaderEpoch any `json:"leaderEpoch"`
		} `json:"desired"`
		Status struct {
			Phase     string `json:"phase"`
			PhaseName string `json:"phaseName"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &parts); err != nil {
		t.Fatal(err)
	}
	if _, ok := parts.Desired.LeaderEpoch.(float64); !ok {
		t.Errorf("-o json: desired.leaderEpoch is %T %v; want a number", parts.Desired.LeaderEpoch, parts.Desired.LeaderEpoch)
	}
	if parts.Status.Phase != "NODE_PHASE_PROVISIONED" || parts.Status.PhaseName != "Provisioned" {
		t.Errorf("-o json: status phase %q, phaseName %q; want NODE_PHASE_PROVISIONED and Provisioned", parts.Status.Phase, parts.Status.PhaseName)
	}

	code, _, stderr = sluice(t, s.URL(), "describe", "node", "node-99")
	if code != 1 || !strings.Contains(stderr, `no node "node-99"`) {
		t.Errorf("unknown node: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
	code, _, stderr = sluice(t, s.URL(), "describe", "node", "bad name")
	if code != 2 || !strings.Contains(stderr, `node name "bad name"`) {
		t.Errorf("bad name: exit %d, stderr %q; want 2 naming it", code, stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "describe", "rollout"); code != 0 || !strings.Contains(out, "succeeded") && !strings.Contains(strings.ToLower(out), "succeeded") {
		t.Errorf("describe rollout: exit %d:\n%s", code, out)
	}
}

// get without a kind lists the kinds; get nodes -l selects by label, and
// -l is refused elsewhere or when it is not key=value.
func TestGet_KindsAndNodeSelector(t *testing.T) {
	s := startSystem(t, 2) // node-01 in zone-a, node-02 in zone-b
	code, out, _ := sluice(t, s.URL(), "get")
	if code != 0 || !strings.Contains(out, "KIND") || !strings.Contains(out, "nodes") || !strings.Contains(out, "fp") {
		t.Errorf("get: exit %d:\n%s", code, out)
	}
	code, out, stderr := sluice(t, s.URL(), "get", "nodes", "-l", "zone=zone-a")
	if code != 0 || !strings.Contains(out, "node-01") || strings.Contains(out, "node-02") {
		t.Errorf("get nodes -l zone=zone-a: exit %d:\n%s%s", code, out, stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "get", "nodes", "-l", "zone=zone-z", "-o", "json"); code != 0 || !strings.Contains(out, `"items": []`) {
		t.Errorf("get nodes -l zone=zone-z -o json: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"get", "intents", "-l", "zone=zone-a"}, {"get", "nodes", "-l", "zone"}} {
		if code, _, stderr := sluice(t, s.URL(), args...); code != ExitUsage || !strings.Contains(stderr, "-l") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming -l", args, code, stderr)
		}
	}
}
