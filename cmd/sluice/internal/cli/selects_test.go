package cli

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestSelectsNone_WarnsOfAnIntentThatReachesNoPresentNode(t *testing.T) {
	net := func(name string, labels map[string]string) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: 100, Vni: 10100, NodeSelector: &sluicev1.NodeSelector{MatchLabels: labels}}}}
	}
	fleet := []map[string]string{{"rack": "rack-a1", "zone": "zone-a"}, {"rack": "rack-a2", "zone": "zone-b"}}
	tests := []struct {
		name    string
		intents []*sluicev1.Intent
		present []map[string]string
		want    []string
	}{
		{name: "a selector no node matches", intents: []*sluicev1.Intent{net("t", map[string]string{"rack": "rack-1"})}, present: fleet,
			want: []string{"warning: layer2network/t selects 0 of the 2 present nodes (nodeSelector rack=rack-1): no node gets it"}},
		{name: "one label of two does not match", intents: []*sluicev1.Intent{net("t", map[string]string{"rack": "rack-a1", "zone": "zone-b"})}, present: fleet,
			want: []string{"(nodeSelector rack=rack-a1,zone=zone-b)"}},
		{name: "a selector one node matches", intents: []*sluicev1.Intent{net("t", map[string]string{"zone": "zone-b"})}, present: fleet},
		{name: "no selector: every node", intents: []*sluicev1.Intent{net("t", nil)}, present: fleet},
		{name: "no node present: nothing to say", intents: []*sluicev1.Intent{net("t", map[string]string{"rack": "rack-1"})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := selectsNone(tt.intents, tt.present)
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %d warning(s) holding %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %q, want it to hold %q", got[i], w)
				}
			}
		})
	}
}

// apply and diff warn of an intent whose selector selects none of the
// present nodes; the apply is stored all the same.
func TestApplyAndDiff_IntentSelectingNoPresentNode_Warns(t *testing.T) {
	s := startSystem(t, 2) // labelled zone=zone-a|b, rack=rack-1|2
	nowhere := "kind: Layer2Network\nname: nowhere\nspec: {vlan: 300, vni: 10300, nodeSelector: {matchLabels: {rack: rack-a1}}}\n"
	somewhere := "---\nkind: Layer2Network\nname: somewhere\nspec: {vlan: 301, vni: 10301, nodeSelector: {matchLabels: {zone: zone-a}}}\n"
	f := writeFile(t, "n.yaml", nowhere+somewhere)
	const want = "warning: layer2network/nowhere selects 0 of the 2 present nodes (nodeSelector rack=rack-a1)"
	code, stdout, stderr := sluice(t, s.URL(), "diff", "-f", f)
	if code != ExitDiffers || !strings.Contains(stderr, want) || strings.Contains(stderr, "layer2network/somewhere selects") {
		t.Fatalf("diff: exit %d, want 1 (changes) and a warning of nowhere only\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = sluice(t, s.URL(), "apply", "-f", f)
	if code != 0 || !strings.Contains(stdout, "layer2network/nowhere created") || !strings.Contains(stderr, want) ||
		strings.Contains(stderr, "layer2network/somewhere selects") {
		t.Fatalf("apply: exit %d, want it stored with a warning of nowhere only\n%s%s", code, stdout, stderr)
	}
}
