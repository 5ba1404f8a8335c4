package configurator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestOutcomes_PerDocument: what a sync tells each document it read.
func TestOutcomes_PerDocument(t *testing.T) {
	spec := &sluicev1.RegistrySpec{Name: "kube"}
	noVRF := &sluicev1.Intent{Name: "novrf", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 120, Vni: 10120, AnycastGateways: []string{"10.0.0.1/24"}}}}
	snap := docs(
		doc("Layer2Network/net/a", l2("a", 100)),
		doc("Layer2Network/net/novrf", noVRF),
		doc("Layer2Network/net/shared", l2("shared", 130)),
		registry.Document{Origin: "Layer2Network/net/broken", Err: fmt.Errorf("spec.vlan: is not a number")},
		registry.Document{Origin: "Layer2NetworkConfiguration/mac", Intents: []*sluicev1.Intent{l2("mac", 140)},
			Err: fmt.Errorf("spec.anycastMac: %w", registry.ErrUnmapped)},
	)
	live := stored(owned("api", "", l2("shared", 130)))
	plan := planSync(spec, snap, live, nil, nil, settling{})
	// In force: a as declared, mac with another VLAN (an undo went back to
	// a revision holding an earlier version of it).
	head := registry.Revision{ID: "h", Generation: 3}
	inForce := registry.Revision{ID: "f", Generation: 2, Intents: []*sluicev1.Intent{l2("a", 100), l2("mac", 141)}}
	got := outcomes(snap, plan, head, inForce)
	want := map[string]struct {
		refused, note string
		holds         bool
	}{
		"Layer2Network/net/a":            {holds: true},
		"Layer2Network/net/novrf":        {refused: "layer2network/novrf: spec.vrf: is required when anycastGateways are set"},
		"Layer2Network/net/shared":       {refused: "layer2network/shared is owned by api"},
		"Layer2Network/net/broken":       {refused: "spec.vlan: is not a number"},
		"Layer2NetworkConfiguration/mac": {note: "spec.anycastMac"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d: %+v", len(got), len(want), got)
	}
	for _, o := range got {
		w := want[o.Origin]
		if (w.refused == "") != (o.Refused == "") || !strings.Contains(o.Refused, w.refused) {
			t.Errorf("%s: refused %q, want one containing %q", o.Origin, o.Refused, w.refused)
		}
		if (w.note == "") != (o.Note == "") || !strings.Contains(o.Note, w.note) {
			t.Errorf("%s: note %q, want one containing %q", o.Origin, o.Note, w.note)
		}
		if o.Head.ID != head.ID || o.Head.Generation != head.Generation || o.InForce.ID != inForce.ID || o.InForce.Generation != inForce.Generation {
			t.Errorf("%s: head %v in force %v", o.Origin, o.Head, o.InForce)
		}
		if o.InForceHolds != w.holds {
			t.Errorf("%s: the revision in force holds it: %v, want %v", o.Origin, o.InForceHolds, w.holds)
		}
	}
}
