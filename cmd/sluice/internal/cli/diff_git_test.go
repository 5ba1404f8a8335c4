package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
)

// l2Doc declares layer2 network name with VNI vni, on the nodes of zone
// when it is not "".
func l2Doc(name string, vlan, vni int, zone string) string {
	sel := ""
	if zone != "" {
		sel = fmt.Sprintf(", nodeSelector: {matchLabels: {zone: %s}}", zone)
	}
	return fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d%s}\n", name, vlan, vni, sel)
}

// sluice diff --git A..B previews the change between two commits of a git
// registry's branch: the intents added, removed and changed (a changed
// one with its fields), and the nodes each change reaches, grouped as
// sluice diff groups them. It writes nothing; a bad range, an unknown
// registry and one that is not git are refused naming the flag.
func TestDiff_GitRange_ShowsTheIntentsAndTheNodesTheyReach(t *testing.T) {
	const nodes = 6 // node-01 node-04: zone-a; node-02 node-05: zone-b; node-03 node-06: zone-c
	s := startSystem(t, nodes)
	bin := sluiceBinary(t)
	run := builtAgainst(t, bin, s.URL()) // the built command as a shell runs it
	g := gittest.New(t)
	c1 := g.Commit("red everywhere, green in zone a", map[string]string{
		"intents/red.yaml": l2Doc("red", 100, 10100, ""), "intents/green.yaml": l2Doc("green", 101, 10101, "zone-a"), "README.md": "not an intent"})
	c2 := g.Commit("red: vlan 110; green out, blue in zone b", map[string]string{
		"intents/red.yaml": l2Doc("red", 110, 10100, ""), "intents/green.yaml": "", "intents/blue.yaml": l2Doc("blue", 102, 10102, "zone-b")})
	natstest.Eventually(t, 60*time.Second, "every node present", func() bool {
		_, out, _ := run("get", "nodes")
		return strings.Count(out, "\nnode-") == nodes
	})
	if code, out, stderr := run("registry", "add", "gitops", "--git", g.URL(), "--path", "intents"); code != 0 {
		t.Fatalf("registry add: exit %d: %s%s", code, out, stderr)
	}
	if code, out, stderr := run("registry", "add", "plain", "--dir", t.TempDir()); code != 0 {
		t.Fatalf("registry add: exit %d: %s%s", code, out, stderr)
	}
	natstest.Eventually(t, 60*time.Second, "the registry's head commit in force", func() bool {
		_, out, _ := run("get", "registries")
		return strings.Contains(out, c2[:12])
	})
	head := func() string {
		t.Helper()
		e, err := openBuckets(t, s.URL()).Revisions.Get(context.Background(), contract.KeyHead)
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}
	before := head()

	code, out, stderr := run("diff", "--git", c1+".."+c2, "--registry", "gitops")
	if code != ExitDiffers {
		t.Fatalf("diff --git: exit %d, want %d\n%s%s", code, ExitDiffers, out, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("registry gitops (%s branch main path intents): %s (red everywhere, green in zone a) → %s (red: vlan 110; green out, blue in zone b)\n", g.URL(), c1[:12], c2[:12]),
		"intents: 1 added, 1 removed, 1 changed\n  + layer2network/blue\n  - layer2network/green\n  ~ layer2network/red spec.vlan: 100 → 110\n",
		"nodes: 6 present, 6 change, 0 unchanged\n",
		"  2 nodes: node-01 node-04\n      - layer2network/green\n      ~ layer2network/red spec.vlan: 100 → 110\n",
		"  2 nodes: node-02 node-05\n      + layer2network/blue\n      ~ layer2network/red spec.vlan: 100 → 110\n",
		"  2 nodes: node-03 node-06\n      ~ layer2network/red spec.vlan: 100 → 110\n",
		"nothing was stored",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("diff --git lacks %q:\n%s", want, out)
		}
	}

	// The same range spelled from the branch's head, with short hashes, as JSON.
	for _, rng := range []string{"HEAD~1..HEAD", c1[:7] + ".." + c2[:7], "HEAD~1.."} {
		code, out, stderr = run("diff", "--git", rng, "-o", "json") // the one git registry: no --registry
		var r struct {
			Registry string
			From, To struct{ Rev, Hash, Subject, Author string }
			Intents  []struct {
				Intent, Op string
				Fields     []struct {
					Path     string
					From, To json.RawMessage
				}
			}
			Groups []struct {
				Nodes   []string
				Intents []struct{ Intent, Op string }
			}
		}
		if err := json.Unmarshal([]byte(out), &r); code != ExitDiffers || err != nil {
			t.Fatalf("diff --git %s -o json: exit %d, %v\n%s%s", rng, code, err, out, stderr)
		}
		if r.Registry != "gitops" || r.From.Hash != c1 || r.To.Hash != c2 || r.To.Subject != "red: vlan 110; green out, blue in zone b" || r.To.Author != gittest.Author || len(r.Intents) != 3 ||
			r.Intents[2].Intent != "layer2network/red" || r.Intents[2].Op != "changed" || len(r.Intents[2].Fields) != 1 ||
			string(r.Intents[2].Fields[0].From) != "100" || string(r.Intents[2].Fields[0].To) != "110" || len(r.Groups) != 3 {
			t.Errorf("diff --git %s -o json = %s", rng, out)
		}
	}

	if code, out, stderr = run("diff", "--git", c2+".."+c2); code != 0 || !strings.Contains(out, "no change") {
		t.Errorf("diff of a commit with itself: exit %d, want 0 saying no change\n%s%s", code, out, stderr)
	}

	for _, tt := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"--git", c1}, ExitUsage, "--git: \"" + c1 + "\": give two commits as A..B"},
		{[]string{"--git", "0123abcd.." + c2}, ExitDiffFailed, `--git: "0123abcd": no such commit in ` + g.URL() + " (branch main)"},
		{[]string{"--git", c1 + "..nosuch"}, ExitDiffFailed, `--git: "nosuch": no such commit`},
		{[]string{"--git", c1 + ".." + c2, "--registry", "nosuch"}, ExitUsage, "--registry: there is no registry nosuch"},
		{[]string{"--git", c1 + ".." + c2, "--registry", "plain"}, ExitUsage, "--registry: plain is a directory registry, not a git registry"},
		{[]string{"--registry", "gitops"}, ExitUsage, "--registry goes with --git A..B"},
		{[]string{"--git", c1 + ".." + c2, "-f", t.TempDir()}, ExitUsage, "give it or -f, not both"},
		{[]string{"--git", c1 + ".." + c2, "--max-parallel", "2"}, ExitUsage, "--max-parallel goes with -f, not --git"},
	} {
		code, out, stderr := run(append([]string{"diff"}, tt.args...)...)
		if code != tt.wantCode || !strings.Contains(stderr, tt.want) {
			t.Errorf("diff %q: exit %d, stderr %q; want %d naming %q\n%s", tt.args, code, stderr, tt.wantCode, tt.want, out)
		}
	}
	if _, out, _ := run("__complete", "diff", "--git", "HEAD~1..", "--registry", "git"); !strings.HasPrefix(out, "gitops\n") {
		t.Errorf("--registry completes to %q, want gitops", out)
	}
	if after := head(); after != before {
		t.Errorf("the head changed during the diffs")
	}

	// A commit with an invalid intent: previewed, with the sync's verdict on stderr.
	c3 := g.Commit("blue: vlan 5000", map[string]string{"intents/blue.yaml": l2Doc("blue", 5000, 10102, "zone-b")})
	if code, out, stderr = run("diff", "--git", c2+".."+c3); code != ExitDiffers || !strings.Contains(stderr, "spec.vlan") ||
		!strings.Contains(stderr, "at "+c3[:12]+": a sync reports it invalid and keeps the version in force") {
		t.Errorf("diff to an invalid intent: exit %d, stderr %q; want 1 warning of the invalid VLAN\n%s", code, stderr, out)
	}
}
