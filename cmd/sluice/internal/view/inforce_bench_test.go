package view_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// inForceFleet is a revision of 120 intents (a layer2 network per rack, one
// per zone, 10 routing tables on every node) and 10,000 nodes in 10 zones
// of 10 racks; with unique, each node also carries its own hostname label,
// so every node is a label set of its own.
func inForceFleet(unique bool) (*sluicev1.Revision, []view.Node) {
	rev := &sluicev1.Revision{Id: "rev-1"}
	l2 := func(name string, vlan uint32, labels map[string]string) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: vlan, Vni: 10000 + vlan, NodeSelector: &sluicev1.NodeSelector{MatchLabels: labels}}}}
	}
	for r := range 100 {
		rev.Intents = append(rev.Intents, l2(fmt.Sprintf("rack-%02d", r), uint32(100+r), map[string]string{"rack": fmt.Sprintf("rack-%02d", r)}))
	}
	for z := range 10 {
		rev.Intents = append(rev.Intents, l2(fmt.Sprintf("zone-%d", z), uint32(1000+z), map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", z)}))
		rev.Intents = append(rev.Intents, &sluicev1.Intent{Name: fmt.Sprintf("t%d", z),
			Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: uint32(100 + z)}}})
	}
	nodes := make([]view.Node, 10_000)
	for i := range nodes {
		rack := i / 100
		labels := map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", rack/10), "rack": fmt.Sprintf("rack-%02d", rack)}
		name := fmt.Sprintf("node-%05d", i)
		if unique {
			labels["kubernetes.io/hostname"] = name
		}
		nodes[i] = view.Node{Name: name, Presence: &sluicev1.NodePresence{Node: name, Labels: labels},
			Status: &sluicev1.NodeStatus{Node: name, AppliedFingerprint: "a config of another revision"}}
	}
	return rev, nodes
}

// BenchmarkInForce_10kNodes is the dashboard's in-force check when a new
// revision comes in force (its state's setApplied): every node of 10,000
// checked once against a fresh InForce, which renders the revision once
// per distinct label set: 100 racks, or 10,000 nodes each its own.
// Run: go test ./cmd/sluice/internal/view -run '^$' -bench InForce -benchmem
func BenchmarkInForce_10kNodes(b *testing.B) {
	for _, tt := range []struct {
		name   string
		unique bool
	}{{"RackLabels", false}, {"EveryNodeUnique", true}} {
		b.Run(tt.name, func(b *testing.B) {
			rev, nodes := inForceFleet(tt.unique)
			b.ReportAllocs()
			for b.Loop() {
				f := view.NewInForce(rev)
				for _, n := range nodes {
					if f.Of(n) != "" {
						b.Fatal("a node of another config counted in force")
					}
				}
			}
		})
	}
}
