package cli

import (
	"strings"
	"testing"
)

// Shell completion offers the kinds, then what the control plane holds:
// node names, rollout ids, intents of a kind (cobra's __complete is what
// the shell scripts of `sluice completion` call).
func TestCompletion_OffersKindsAndStoredNames(t *testing.T) {
	s := startSystem(t, 2)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout: %s", out)
	}
	_, ids, _ := sluice(t, s.URL(), "get", "rollouts", "-o", "name")
	id := strings.TrimPrefix(strings.TrimSpace(ids), "rollout/")
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"kinds", []string{"get", "no"}, []string{"nodes"}},
		{"node names after a kind", []string{"get", "nodes", ""}, []string{"node-01", "node-02"}},
		{"describe node", []string{"describe", "node", "node-0"}, []string{"node-01", "node-02"}},
		{"rollout ids", []string{"rollout", "status", ""}, []string{id}},
		{"intent kinds to delete", []string{"delete", "rout"}, []string{"routingtable"}},
		{"intents of a kind", []string{"delete", "routingtable", ""}, []string{"mgmt"}},
		{"event kinds", []string{"events", "--kind", "reg"}, []string{"registry"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := sluice(t, s.URL(), append([]string{"__complete"}, tt.args...)...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			got := lines[:len(lines)-1] // the last line is the directive, ":4"
			if code != 0 || strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("__complete %v: exit %d, got %q, want %q\n%s", tt.args, code, got, tt.want, stderr)
			}
		})
	}
}
