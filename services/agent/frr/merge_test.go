package frr_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func merge(t *testing.T, base, rendered string) string {
	t.Helper()
	out, err := frr.Merge(base, rendered)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return out
}

// keepsBase fails unless every line of base appears in merged, in order,
// outside sluice's block.
func keepsBase(t *testing.T, base, merged string) {
	t.Helper()
	var outside []string
	in := false
	for _, l := range strings.Split(merged, "\n") {
		switch {
		case strings.HasPrefix(l, "! sluice: begin"):
			in = true
		case strings.HasPrefix(l, "! sluice: end"):
			in = false
		case !in:
			outside = append(outside, l)
		}
	}
	i := 0
	for _, l := range strings.Split(strings.TrimSuffix(base, "\n"), "\n") {
		for i < len(outside) && outside[i] != l {
			i++
		}
		if i == len(outside) {
			t.Fatalf("base line %q is not kept (in order, outside the block) in\n%s", l, merged)
		}
		i++
	}
}

func TestMerge_Golden(t *testing.T) {
	base := readTestdata(t, "base.conf")
	kernel := render(t, fabric(), settings())
	merged := merge(t, base, kernel)
	golden(t, "merge-kernel.conf", merged)
	keepsBase(t, base, merged)

	// A re-render replaces the block in its place: the merged file may
	// be the next base, and the operator's lines stay as they are.
	s := settings()
	s.VRFs = hostnet.VRFsOff
	small := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{vrfRoute("red-leak", "red", 10, "", items("10.20.0.0/16"), nil)}}
	again := merge(t, merged, render(t, small, s))
	golden(t, "merge-rerender.conf", again)
	keepsBase(t, base, again)
	if strings.Contains(again, "vrf-blue") || strings.Count(again, "! sluice: begin") != 1 {
		t.Errorf("the earlier block is not replaced whole:\n%s", again)
	}
}

func TestMerge_SameRenderAgain_IsTheSameFile(t *testing.T) {
	base := readTestdata(t, "base.conf")
	rendered := render(t, fabric(), settings())
	once := merge(t, base, rendered)
	if twice := merge(t, once, rendered); twice != once {
		t.Fatalf("merging the merged file again changes it:\n%s\nwas\n%s", twice, once)
	}
}

func TestMerge_Placement(t *testing.T) {
	block := "! sluice: begin -- rendered by the sluice agent from this node's config; edits up to the end marker are replaced on every apply\nrouter bgp 1\nexit\n! sluice: end\n"
	for _, tc := range []struct{ name, base, want string }{
		{"empty base", "", block},
		{"at the end", "hostname a\n", "hostname a\n" + block},
		{"base without a final newline", "hostname a", "hostname a\n" + block},
		{"before a final end", "hostname a\n!\nend\n\n", "hostname a\n!\n" + block + "end\n\n"},
		{"an end in the middle is a line like any", "hostname a\nend\nlog syslog\n", "hostname a\nend\nlog syslog\n" + block},
		{"in place of an earlier block", "hostname a\n! sluice: begin (older text)\nold line\n! sluice: end\nlog syslog\n",
			"hostname a\n" + block + "log syslog\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := merge(t, tc.base, "router bgp 1\nexit\n"); got != tc.want {
				t.Fatalf("Merge =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestMerge_RefusesABaseThatDefinesWhatSluiceRenders(t *testing.T) {
	kernel := render(t, fabric(), settings())
	cs := settings()
	cs.ClusterVRF = "cluster"
	clusterVRF := render(t, fabric(), cs)
	for _, tc := range []struct {
		name, base, rendered string
		wantErr              string // "" = merges
	}{
		{name: "a route map with sluice's prefix", base: "hostname a\n!\nroute-map sluice_mine permit 10\nexit\n", rendered: kernel,
			wantErr: `base line 3 "route-map sluice_mine permit 10" defines sluice_mine, a name with sluice's prefix "sluice_"`},
		{name: "a prefix list with sluice's prefix", base: "ipv6 prefix-list sluice_red_import_10 seq 5 permit ::/0\n", rendered: kernel,
			wantErr: "base line 1 "},
		{name: "a community list with sluice's prefix", base: "bgp community-list standard sluice_c permit 1:1\n", rendered: kernel,
			wantErr: "defines sluice_c"},
		{name: "a VRF with sluice's device prefix", base: "vrf vrf-red\n ip route 10.0.0.0/8 blackhole\nexit-vrf\n", rendered: kernel,
			wantErr: `base line 1 "vrf vrf-red" configures VRF vrf-red`},
		{name: "the default VRF's BGP instance, which sluice renders", base: "!\n!\nrouter bgp 65001\n bgp router-id 1.1.1.1\nexit\n", rendered: kernel,
			wantErr: `base line 3 "router bgp 65001" is a BGP instance of VRF default`},
		{name: "the cluster VRF's BGP instance", base: "router bgp 65001 vrf cluster\nexit\n", rendered: clusterVRF,
			wantErr: "is a BGP instance of VRF cluster"},
		{name: "a BGP instance of a sluice VRF it does not render yet", base: "router bgp 65001 vrf vrf-later\nexit\n", rendered: kernel,
			wantErr: `is a BGP instance of VRF vrf-later, which has the prefix "vrf-"`},
		{name: "a begin marker without its end", base: "hostname a\n! sluice: begin\nrouter bgp 1\n", rendered: kernel,
			wantErr: `base line 2 "! sluice: begin" has no "! sluice: end" after it`},
		{name: "an end marker without a begin", base: "hostname a\n! sluice: end\n", rendered: kernel,
			wantErr: `base line 2 "! sluice: end" ends no sluice block`},
		{name: "two blocks", base: "! sluice: begin\n! sluice: end\n! sluice: begin\n! sluice: end\n", rendered: kernel,
			wantErr: "base line 3 is a second"},
		{name: "every conflict at once (the first)", base: "route-map sluice_a permit 1\nexit\nroute-map sluice_b permit 1\nexit\n", rendered: kernel,
			wantErr: "base line 1 "},
		{name: "every conflict at once (the second)", base: "route-map sluice_a permit 1\nexit\nroute-map sluice_b permit 1\nexit\n", rendered: kernel,
			wantErr: "base line 3 "},
		// What the base may do.
		{name: "the default VRF's instance when the cluster VRF is another", base: "router bgp 65001\n neighbor 10.0.0.1 remote-as external\nexit\n", rendered: clusterVRF},
		{name: "another VRF's instance referring to sluice's maps", base: readTestdata(t, "base.conf"), rendered: kernel},
		{name: "a VRF of its own", base: "vrf mgmt\nexit-vrf\n", rendered: kernel},
		{name: "a negated line", base: "no route-map sluice_old\n", rendered: kernel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := frr.Merge(tc.base, tc.rendered)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Merge: %v", err)
			case tc.wantErr != "" && (!errors.Is(err, frr.ErrBaseConflict) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Merge = %q, %v; want ErrBaseConflict containing %q", out, err, tc.wantErr)
			}
		})
	}
}
