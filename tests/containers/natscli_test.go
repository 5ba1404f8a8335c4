//go:build containers

package containers

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// natsCLI is the nats CLI `make natscli` installs: bin/nats, or SLUICE_NATSCLI.
func natsCLI(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SLUICE_NATSCLI")
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "nats")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("the nats CLI: %v: install it with make natscli (or set SLUICE_NATSCLI)", err)
	}
	return abs
}

// nats runs the nats CLI as an operator on this machine would — the
// README's commands, word for word — with NATS_URL naming the published
// servers and no nats context of the user's.
func (c *cluster) nats(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+strings.Join(c.natsURLs, ","), "XDG_CONFIG_HOME="+t.TempDir(), "NO_COLOR=1")
	if c.sec != nil {
		cmd.Env = append(cmd.Env, c.sec.natsCLIEnv(t)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("$ nats %s\n%s", strings.Join(args, " "), out)
	return string(out)
}

// testNatsCLI runs the README's nats CLI commands against the cluster: the
// buckets are listed, a node's status prints as readable JSON, the events
// stream's last rollout event too, the three micro services are listed and
// the coordinators' roles shown by their stats. (`nats stream view` pages interactively and
// refuses to run without a terminal: the README shows it, the test cannot.)
func testNatsCLI(t *testing.T, c *cluster) {
	bin := natsCLI(t)

	out := c.nats(t, bin, "kv", "ls")
	for _, b := range []string{contract.BucketStatus, contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketIntents} {
		if !strings.Contains(out, b) {
			t.Errorf("nats kv ls does not list %s", b)
		}
	}

	// Without --raw the CLI shows a value's first 120 bytes only.
	out = c.nats(t, bin, "kv", "get", contract.BucketStatus, "node-01", "--raw")
	var st sluicev1.NodeStatus
	if err := store.Unmarshal([]byte(out), &st); err != nil || st.GetNode() != "node-01" || st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Errorf("nats kv get %s node-01 --raw: %v; want node-01's status, PROVISIONED, as JSON", contract.BucketStatus, err)
	}

	out = c.nats(t, bin, "stream", "get", contract.StreamEvents, "--last-for", "sluice.events.rollout.>")
	var ev sluicev1.Event
	if i := strings.Index(out, "{"); i < 0 {
		t.Errorf("nats stream get %s printed no JSON", contract.StreamEvents)
	} else if err := store.Unmarshal([]byte(out[i:]), &ev); err != nil || ev.GetKind() != contract.KindRollout || ev.GetType() == "" {
		t.Errorf("nats stream get %s: %v, %v; want a rollout event as JSON", contract.StreamEvents, err, &ev)
	}

	out = c.nats(t, bin, "micro", "ls")
	for _, svc := range []string{contract.ConfiguratorService, contract.CoordinatorService, contract.ReaperService} {
		if !strings.Contains(out, svc) {
			t.Errorf("nats micro ls does not list %s", svc)
		}
	}
	// Every instance announces its version. The table prints a version
	// once for rows that repeat the one above (issue 25 read the blank
	// cells as missing versions); --json shows each instance's.
	out = c.nats(t, bin, "micro", "ls", "--json")
	var infos []struct {
		Name    string `json:"name"`
		ID      string `json:"id"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &infos); err != nil {
		t.Fatalf("nats micro ls --json: %v", err)
	}
	versions := map[string]int{}
	for _, in := range infos {
		if in.Version == "" || in.Version == "0.0.0-unknown" {
			t.Errorf("nats micro ls --json: %s (%s) announces version %q; want its build", in.Name, in.ID, in.Version)
		}
		versions[in.Name]++
	}
	for _, svc := range []string{contract.ConfiguratorService, contract.CoordinatorService, contract.ReaperService} {
		if versions[svc] == 0 {
			t.Errorf("nats micro ls --json does not list %s", svc)
		}
	}

	// Each coordinator's status, from its micro stats handler: one leads,
	// the other stands by for it (docs/operations.md, "Who leads").
	out = c.nats(t, bin, "micro", "stats", contract.CoordinatorService, "--json")
	var stats []struct {
		Endpoints []struct {
			Data contract.CoordinatorStatus `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("nats micro stats %s --json: %v", contract.CoordinatorService, err)
	}
	roles := map[string]string{}
	for _, s := range stats {
		for _, e := range s.Endpoints {
			roles[e.Data.Instance] = e.Data.Role
		}
	}
	if !maps.Equal(roles, map[string]string{"coordinator-1": "leader", "coordinator-2": "standby"}) &&
		!maps.Equal(roles, map[string]string{"coordinator-1": "standby", "coordinator-2": "leader"}) {
		t.Errorf("nats micro stats %s: roles %v; want one coordinator leading, the other standing by", contract.CoordinatorService, roles)
	}
}
