package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
)

// TestDevSecure_RollsOutWithLeastPrivilege_AndTheCLIActsByRole: with
// --secure every service and agent runs as a user of its role; a rollout
// over every node succeeds with no permission refused; the admin user
// applies; the read-only user reads nodes, rollouts and events but cannot
// apply; without credentials nothing connects; a revoked node is cut off
// and its status goes stale while the others carry on.
func TestDevSecure_RollsOutWithLeastPrivilege_AndTheCLIActsByRole(t *testing.T) {
	data := t.TempDir()
	var logs lockedBuffer
	settings := contract.DefaultSettings()
	settings.NodeLease = 15 * time.Second // a revoked node leaves within the test (the 3m default would take minutes)
	s, err := dev.Start(context.Background(), dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Stderr: &logs, Secure: true, Settings: settings})
	if err != nil {
		t.Fatalf("start sluice dev --secure: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	admin := s.AdminCreds()
	if admin == "" {
		t.Fatal("no admin credentials with --secure")
	}
	as := func(credsFile string, args ...string) (int, string, string) {
		return sluice(t, s.URL(), append([]string{"--creds", credsFile}, args...)...)
	}

	if code, _, stderr := sluice(t, s.URL(), "get", "nodes"); code == 0 || !strings.Contains(strings.ToLower(stderr), "authorization") {
		t.Fatalf("get nodes without credentials: exit %d, stderr %q; want an authorization error", code, stderr)
	}
	if code, _, stderr := as(admin, "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply as admin: exit %d: %s", code, stderr)
	}
	if code, out, stderr := as(admin, "rollout", "status", "--watch"); code != 0 || !strings.Contains(out, "3/3") && !strings.Contains(out, "3 provisioned") {
		t.Fatalf("rollout as the nodes' own users: exit %d\n%s%s", code, out, stderr)
	}

	code, out, stderr := sluice(t, s.URL(), "creds", "issue", "readonly", "--dir", s.Creds().Dir)
	if code != 0 {
		t.Fatalf("creds issue readonly: exit %d: %s", code, stderr)
	}
	readonly := strings.TrimSpace(out)
	if code, out, stderr := as(readonly, "get", "nodes"); code != 0 || !strings.Contains(out, "node-03") {
		t.Fatalf("get nodes as readonly: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := as(readonly, "events", "--last", "5"); code != 0 || out == "" {
		t.Fatalf("events as readonly: exit %d\n%s%s", code, out, stderr)
	}
	changed := strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1)
	if code, _, stderr := as(readonly, "apply", "-f", writeFile(t, "b.yaml", changed)); code == 0 ||
		!strings.Contains(stderr, `the NATS server refused it: nats: permissions violation: Permissions Violation for Publish to "sluice.api.configurator.apply"`) {
		t.Fatalf("apply as readonly: exit %d, stderr %q; want it refused naming the subject", code, stderr)
	}

	if code, out, stderr := sluice(t, s.URL(), "creds", "revoke", "node-02", "--dir", s.Creds().Dir); code != 0 || !strings.Contains(out, "pushed") {
		t.Fatalf("creds revoke node-02: exit %d\n%s%s", code, out, stderr)
	}
	// node-02's lease is no longer renewed: it leaves the fleet. margin:
	// the poll ends as soon as it left, about a node lease (15s) from now.
	natstest.Eventually(t, 90*time.Second, "node-02 to leave (PRESENT no)", func() bool {
		_, out, _ := as(admin, "get", "nodes")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "node-02" {
				return f[1] == "no"
			}
		}
		return true // no longer listed
	})
	if code, _, stderr := as(admin, "apply", "-f", writeFile(t, "c.yaml", changed)); code != 0 {
		t.Fatalf("apply as admin after the revocation: exit %d: %s", code, stderr)
	}
	if code, out, stderr := as(admin, "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout over the two nodes left: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(logs.String(), "Permissions Violation") {
		t.Fatalf("a component was refused a permission:\n%s", grepLines(logs.String(), "Permissions Violation"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCreds_RefusesBadRequestsNamingTheProblem: issuing needs a known role
// and, for a node, its name; init never replaces an operator.
func TestCreds_RefusesBadRequestsNamingTheProblem(t *testing.T) {
	dir := t.TempDir() + "/creds"
	if code, _, stderr := sluice(t, "nats://127.0.0.1:1", "creds", "init", "--dir", dir); code != 0 {
		t.Fatalf("creds init: exit %d: %s", code, stderr)
	}
	tests := []struct {
		args    []string
		code    int
		wantErr string
	}{
		{[]string{"creds", "init", "--dir", dir}, 1, "already holds an operator"},
		{[]string{"creds", "issue", "node", "--dir", dir}, 2, "--node: a node user is issued for one node"},
		{[]string{"creds", "issue", "node", "--node", "Node_1", "--dir", dir}, 2, "--node:"},
		{[]string{"creds", "issue", "admin", "--node", "n1", "--dir", dir}, 2, "--node is for role node only"},
		{[]string{"creds", "issue", "root", "--dir", dir}, 2, `role "root": want one of`},
		{[]string{"creds", "revoke", "nobody", "--dir", dir}, 1, `no user or node "nobody"`},
		{[]string{"creds", "issue", "admin", "--dir", t.TempDir()}, 1, "is this a directory `sluice creds init` made?"},
		{[]string{"creds", "tls", "--dir", dir}, 2, "--hosts: name at least one host"},
	}
	for _, tt := range tests {
		code, _, stderr := sluice(t, "nats://127.0.0.1:1", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.wantErr) {
			t.Errorf("sluice %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.wantErr)
		}
	}
	if code, out, stderr := sluice(t, "nats://127.0.0.1:1", "creds", "issue", "node", "--node", "node-01", "--dir", dir); code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "users/node-01.creds") {
		t.Fatalf("issue node-01: exit %d, %q %s", code, out, stderr)
	}
	if code, out, _ := sluice(t, "nats://127.0.0.1:1", "creds", "list", "--dir", dir); code != 0 || !strings.Contains(out, "node-01") || !strings.Contains(out, "node") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
}
