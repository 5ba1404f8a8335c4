package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
)

// One field changed on many nodes is a handful of lines in diff's short
// form, whatever the number of nodes: the field's path and values once,
// with the nodes it reaches. --full lists every node with each intent's
// whole spec before and after.
func TestDiff_OneFieldOnManyNodes_ShortFormIsShort_FullListsEveryNode(t *testing.T) {
	const nodes = 12
	s := startSystem(t, nodes)
	bin := sluiceBinary(t)
	run := builtAgainst(t, bin, s.URL()) // the built command as a shell runs it
	natstest.Eventually(t, 60*time.Second, "every node present", func() bool {
		_, out, _ := run("get", "nodes")
		return strings.Count(out, "\nnode-") == nodes
	})
	if code, _, stderr := run("apply", "-f", writeFile(t, "a.yaml", tenantA), "--max-parallel", "100%"); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	if code, out, stderr := run("rollout", "status", "--watch"); code != 0 {
		t.Fatalf("rollout: exit %d: %s%s", code, out, stderr)
	}
	changed := writeFile(t, "b.yaml", strings.Replace(tenantA, "vlan: 100", "vlan: 200", 1))

	code, out, stderr := run("diff", "-f", changed, "--max-parallel", "100%")
	if code != ExitDiffers {
		t.Fatalf("diff: exit %d, want %d\n%s%s", code, ExitDiffers, out, stderr)
	}
	for _, want := range []string{"nodes: 12 present, 12 change, 0 unchanged, 0 refused",
		"  12 nodes: node-01 node-02 node-03 node-04 node-05 node-06 node-07 node-08 and 4 more\n",
		"      ~ layer2network/tenant-a spec.vlan: 100 → 200\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	// revision, the updated intent, nodes, the group, its field, plan, the
	// one stage, "nothing was stored": 8, where the per-node form has 2 a node.
	if n := strings.Count(out, "\n"); n > 8 {
		t.Errorf("diff of one field on %d nodes is %d lines, want at most 8:\n%s", nodes, n, out)
	}

	code, out, stderr = run("diff", "-f", changed, "--max-parallel", "100%", "--full")
	if code != ExitDiffers {
		t.Fatalf("diff --full: exit %d, want %d\n%s%s", code, ExitDiffers, out, stderr)
	}
	whole := `      ~ layer2network/tenant-a {"layer2Network":{"vlan":100,"vni":10100}} → {"layer2Network":{"vlan":200,"vni":10100}}` + "\n"
	if n := strings.Count(out, whole); n != nodes {
		t.Errorf("diff --full shows the whole spec for %d nodes, want %d:\n%s", n, nodes, out)
	}
	if !strings.Contains(out, "\n  node-12  ") || strings.Contains(out, "12 nodes:") {
		t.Errorf("diff --full does not list each node on its own:\n%s", out)
	}

	type jsonChange struct {
		Intent, Op string
		Fields     []struct {
			Path     string
			From, To json.RawMessage
		}
		From, To json.RawMessage
	}
	var r struct {
		Changes []struct {
			Node    string
			Intents []jsonChange
		}
		Groups []struct {
			Count   int
			Nodes   []string
			Intents []jsonChange
		}
	}
	for _, full := range []bool{false, true} {
		args := []string{"diff", "-f", changed, "-o", "json"}
		if full {
			args = append(args, "--full")
		}
		code, out, stderr = run(args...)
		if err := json.Unmarshal([]byte(out), &r); code != ExitDiffers || err != nil {
			t.Fatalf("diff -o json (full %t): exit %d, %v\n%s%s", full, code, err, out, stderr)
		}
		if len(r.Groups) != 1 || r.Groups[0].Count != nodes || len(r.Groups[0].Nodes) != nodes || len(r.Groups[0].Intents) != 1 ||
			len(r.Groups[0].Intents[0].Fields) != 1 || r.Groups[0].Intents[0].Fields[0].Path != "spec.vlan" ||
			string(r.Groups[0].Intents[0].Fields[0].From) != "100" || string(r.Groups[0].Intents[0].Fields[0].To) != "200" ||
			r.Groups[0].Intents[0].To != nil {
			t.Errorf("diff -o json (full %t): groups %+v", full, r.Groups)
		}
		if len(r.Changes) != nodes || len(r.Changes[0].Intents) != 1 || len(r.Changes[0].Intents[0].Fields) != 1 {
			t.Fatalf("diff -o json (full %t): changes %+v", full, r.Changes)
		}
		if to := compact(r.Changes[0].Intents[0].To); full != (to == `{"layer2Network":{"vlan":200,"vni":10100}}`) || !full && to != "" {
			t.Errorf("diff -o json (full %t): changes[0] carries the spec %s", full, to)
		}
	}
}

// builtAgainst runs the built sluice binary bin against the server at url
// as a shell would: its exit code, stdout and stderr.
func builtAgainst(t *testing.T, bin, url string) func(args ...string) (int, string, string) {
	return func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, append([]string{"--server", url}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), errOut.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String(), errOut.String()
	}
}
