package view

import (
	"reflect"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestConfigDiff_AddedRemovedChanged(t *testing.T) {
	l2 := func(name string, vlan uint32) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 100}}}
	}
	backup := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("kept", 10), l2("gone", 11), l2("moved", 12)}}
	desired := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("kept", 10), l2("moved", 13), l2("new", 14)}}
	got := ConfigDiff(backup, desired)
	want := []ConfigChange{
		{Op: "-", Intent: "layer2network/gone", From: `{"layer2Network":{"vlan":11,"vni":100}}`},
		{Op: "~", Intent: "layer2network/moved", From: `{"layer2Network":{"vlan":12,"vni":100}}`, To: `{"layer2Network":{"vlan":13,"vni":100}}`},
		{Op: "+", Intent: "layer2network/new", To: `{"layer2Network":{"vlan":14,"vni":100}}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff\n got %+v\nwant %+v", got, want)
	}
	if d := ConfigDiff(desired, desired); len(d) != 0 {
		t.Errorf("a config against itself: %+v, want no change", d)
	}
}
