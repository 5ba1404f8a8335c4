package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
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

// describe node shows what runs on the node (the status's applied
// fingerprint, named by the stored config that carries it) and the last
// config it reported invalid, with check and output: after a failed check
// the node runs its restored last-good, which desired alone does not say.
func TestDescribeNode_AppliedAndLastInvalid(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	good, bad := strings.Repeat("a", 64), strings.Repeat("b", 64)
	revGood, revBad := strings.Repeat("1", 64), strings.Repeat("2", 64)
	tests := []struct {
		name    string
		status  *sluicev1.NodeStatus
		want    []string
		notWant []string
	}{
		{"restored its last-good after a failed check",
			&sluicev1.NodeStatus{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Fingerprint: bad, Revision: revBad,
				AppliedFingerprint: good, LastInvalid: &sluicev1.InvalidReport{Fingerprint: bad, Revision: revBad, Rollout: "4-222222222222",
					Check: "mgmt-reachable", Output: "ping 10.0.0.1: 100% packet loss", At: timestamppb.New(now.Add(-time.Minute))}},
			[]string{"Applied:", "fingerprint aaaaaaaaaaaa, revision 111111111111, the backup's: in force on the node now",
				"Last invalid:", "fingerprint bbbbbbbbbbbb, revision 222222222222, rollout 4-222222222222 (rollout target), check mgmt-reachable, 1m ago",
				"Output:", "ping 10.0.0.1: 100% packet loss"}, nil},
		{"provisioned, never invalid",
			&sluicev1.NodeStatus{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: bad, Revision: revBad, AppliedFingerprint: bad},
			[]string{"fingerprint bbbbbbbbbbbb, revision 222222222222, the desired's: in force"}, []string{"Last invalid:"}},
		{"an old agent's status without applied", &sluicev1.NodeStatus{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED},
			nil, []string{"Applied:", "Last invalid:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := nodeDescription{Node: "node-03", Status: tt.status,
				Desired: &sluicev1.DesiredConfig{Fingerprint: bad, Revision: revBad, Rollout: "4-222222222222"},
				Backup:  &sluicev1.DesiredConfig{Fingerprint: good, Revision: revGood, Rollout: "3-111111111111", Proven: true}}
			var b strings.Builder
			writeNodeDescription(&b, d, now)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(b.String(), w) {
					t.Errorf("%q in\n%s", w, b.String())
				}
			}
		})
	}
}
