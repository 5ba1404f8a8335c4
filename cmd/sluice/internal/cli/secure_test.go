package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
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
	// The default node lease (3m): a revoked node must leave at once, not
	// when its lease ends.
	s, err := dev.Start(context.Background(), dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Stderr: &logs, Secure: true, Settings: contract.DefaultSettings()})
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

	if code, _, stderr := sluice(t, s.URL(), "get", "nodes"); code == 0 || !strings.Contains(strings.ToLower(stderr), "authorization") ||
		!strings.Contains(stderr, "--creds (env SLUICE_NATS_CREDS)") {
		t.Fatalf("get nodes without credentials: exit %d, stderr %q; want an authorization error naming --creds", code, stderr)
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
	// A refusal arrives beside the request, not as its answer: the command
	// stops on it rather than at the request's deadline (30 s for apply,
	// 5 s for a KV write), and names the role that may.
	for _, args := range [][]string{
		{"apply", "-f", writeFile(t, "b.yaml", changed)},
		{"registry", "add", "x", "--dir", t.TempDir()},
		{"pause"},
	} {
		start := time.Now()
		code, _, stderr := as(readonly, args...)
		// margin: the refusal comes back in milliseconds; 3 s is below
		// every request's own deadline.
		if took := time.Since(start); code != 1 || took > 3*time.Second ||
			!strings.Contains(stderr, "error: the NATS server refused it: these credentials may not publish to") ||
			!strings.Contains(stderr, "the admin role may (sluice creds issue admin)") || strings.Contains(stderr, "deadline") {
			t.Fatalf("%v as readonly: exit %d after %v, stderr %q; want exit 1 at once, naming the subject and the admin role", args, code, took, stderr)
		}
	}

	if code, out, stderr := as(admin, "creds", "revoke", "node-02", "--dir", s.Creds().Dir); code != 0 || !strings.Contains(out, "pushed") ||
		!strings.Contains(out, "node-02 has left the fleet") {
		t.Fatalf("creds revoke node-02: exit %d\n%s%s", code, out, stderr)
	}
	// Its presence is deleted by the revocation, not left to its lease.
	_, out, _ = as(admin, "get", "nodes")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "node-02" && f[1] != "no" {
			t.Fatalf("node-02 right after its revocation: %q; want PRESENT no", line)
		}
	}
	if _, out, _ := as(admin, "events", "--kind", "node"); !strings.Contains(out, "NodeRevoked") || !strings.Contains(out, "node/node-02") {
		t.Fatalf("events after the revocation:\n%s\nwant NodeRevoked for node-02", out)
	}
	if code, _, stderr := as(admin, "apply", "-f", writeFile(t, "c.yaml", changed)); code != 0 {
		t.Fatalf("apply as admin after the revocation: exit %d: %s", code, stderr)
	}
	if code, out, stderr := as(admin, "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout over the two nodes left: exit %d\n%s%s", code, out, stderr)
	}
	if strings.Contains(logs.String(), "Permissions Violation") {
		t.Fatalf("a component was refused a permission:\n%s", grepLines(logs.String(), "Permissions Violation"))
	}
	everyEventReadable(t, s.URL(), "--creds", admin)
	if strings.Contains(logs.String(), "publishers.go") {
		t.Errorf("a component emitted an event its role may not publish:\n%s", grepLines(logs.String(), "publishers.go"))
	}
	// Revoked with credentials that may not delete its presence: the
	// revocation stands (exit 0) and a note says why the node stays present.
	if code, out, stderr := as(readonly, "creds", "revoke", "node-03", "--dir", s.Creds().Dir); code != 0 || !strings.Contains(out, "pushed") ||
		!strings.Contains(stderr, "could not remove node-03's presence") || !strings.Contains(stderr, "the admin role may") {
		t.Fatalf("creds revoke node-03 with the readonly user's credentials: exit %d, want 0 with a note naming the admin role\n%s%s", code, out, stderr)
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

// TestDevSecure_RecoverFromNodes_EachNodeAnswersAsItsOwnUser: with
// --secure, after the JetStream store is wiped under the agents (the
// credentials and the account resolver stay), the admin's `recover
// --from-nodes` hears every node, each answering as its own node user on
// its own subject, and no component is refused a permission.
func TestDevSecure_RecoverFromNodes_EachNodeAnswersAsItsOwnUser(t *testing.T) {
	data := t.TempDir()
	var logs lockedBuffer
	opts := dev.Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Stderr: &logs, Secure: true}
	s, err := dev.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start sluice dev --secure: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	admin := s.AdminCreds()
	as := func(args ...string) (int, string, string) {
		return sluice(t, s.URL(), append([]string{"--creds", admin}, args...)...)
	}
	if code, _, stderr := as("apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply as admin: exit %d: %s", code, stderr)
	}
	if code, out, stderr := as("rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout: exit %d\n%s%s", code, out, stderr)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(data, "nats", "jetstream")); err != nil {
		t.Fatal(err)
	}
	if s, err = dev.Start(context.Background(), opts); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	var code int
	var out, stderr string
	// margin: the store is lost once the agents' presence is back, at start.
	natstest.Eventually(t, 30*time.Second, "recover --from-nodes as admin", func() bool {
		code, out, stderr = as("recover", "--from-nodes")
		return code == 0
	})
	if !strings.Contains(stderr, "asked 3 nodes with a live presence: 3 answered") || !strings.Contains(out, "name: tenant-a") {
		t.Errorf("recover --from-nodes as admin:\n%s\n%s\nwant every node's answer and the intents on stdout", out, stderr)
	}
	if strings.Contains(logs.String(), "Permissions Violation") {
		t.Fatalf("a component was refused a permission:\n%s", grepLines(logs.String(), "Permissions Violation"))
	}
}
