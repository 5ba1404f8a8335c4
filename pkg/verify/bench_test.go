package verify_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// bigWorld is 10,000 intents on 100,000 nodes: 4,000 networks in 20 zones
// (a quarter carried in a second zone as the same network), a VRF route
// per network, 1,000 routing tables, and nodes labelled zone, rack (50 per
// zone) and a hostname of their own, so that every node is a label set of
// its own (the worst case for grouping by label set). Three violations are
// planted so that findings, and their example nodes, are worked out too.
func bigWorld() ([]*sluicev1.Intent, []verify.Node) {
	const zones, racks, nodes = 20, 50, 100_000
	var ins []*sluicev1.Intent
	for i := range 4000 {
		z := fmt.Sprintf("zone-%02d", i%zones)
		vrf := fmt.Sprintf("tenant-%d", i)
		gw := []string{fmt.Sprintf("10.%d.%d.1/24", i/250, i%250)}
		ins = append(ins, l2(fmt.Sprintf("net-%d", i), uint32(1+i), uint32(10000+i), 9000, vrf, gw, sel("zone", z)))
		if i%4 == 0 && i >= 1000 {
			// The 1,000 networks after the first 1,000 are carried twice;
			// 1,000 + 3,000 + 750 + 4,000 + 1,000 is 9,750: 250 more routes follow.
			ins = append(ins, l2(fmt.Sprintf("net-%d-b", i), uint32(1+i), uint32(10000+i), 9000, vrf, gw, sel("zone", fmt.Sprintf("zone-%02d", (i+1)%zones))))
		}
		ins = append(ins, route(vrf, vrf, 10, []string{"10.255.0.0/16"}, []string{fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)}, fmt.Sprintf("65000:%d", i), sel("zone", z)))
	}
	for i := range 1000 {
		ins = append(ins, table(fmt.Sprintf("table-%d", i), uint32(100_000+i), sel("zone", fmt.Sprintf("zone-%02d", i%zones))))
	}
	for i := range 10_000 - len(ins) - 3 {
		vrf := fmt.Sprintf("tenant-%d", i)
		ins = append(ins, route(vrf+"-extra", vrf, 20, nil, []string{fmt.Sprintf("10.%d.%d.0/24", 16+i/250, i%250)}, "", sel("zone", fmt.Sprintf("zone-%02d", i%zones))))
	}
	ins = append(ins,
		l2("planted-vlan", 4001, 10000, 9000, "tenant-0", []string{"10.0.0.1/24"}, sel("zone", "zone-01")), // net-0's VNI in another zone
		route("planted-typo", "tenant-7x", 30, nil, []string{"192.168.0.0/24"}, "", nil),
		table("planted-table", 100_000, sel("zone", "zone-05")))
	var ns []verify.Node
	for i := range nodes {
		z := i % zones
		ns = append(ns, verify.Node{Name: fmt.Sprintf("node-%06d", i), Labels: map[string]string{
			"zone": fmt.Sprintf("zone-%02d", z), "rack": fmt.Sprintf("zone-%02d-rack-%02d", z, (i/zones)%racks),
			"kubernetes.io/hostname": fmt.Sprintf("node-%06d", i)}})
	}
	return ins, ns
}

// BenchmarkVerify_100kNodes10kIntents is the cost goal: 100,000
// nodes and 10,000 intents verified in at most 2 s on the 2-core VM
// (docs/benchmarks.md, "The fleet verifier").
func BenchmarkVerify_100kNodes10kIntents(b *testing.B) {
	ins, nodes := bigWorld()
	if len(ins) != 10_000 {
		b.Fatalf("%d intents, want 10,000", len(ins))
	}
	if errs := intent.Validate(ins); len(errs) > 0 {
		b.Fatalf("the set breaks per-node rules: %v", errs[:1])
	}
	st := &sluicev1.Strategy{FailureDomain: "zone", FirstWave: 10, MaxParallel: "100"}
	var fs []*sluicev1.Finding
	b.ReportAllocs()
	for b.Loop() {
		fs = verify.Verify(verify.Input{Intents: ins, Nodes: nodes, Strategy: st})
	}
	want := map[string]bool{verify.RuleVNIVLAN: true, verify.RuleVRFUnknown: true, verify.RuleTableShared: true}
	if len(fs) != len(want) {
		b.Fatalf("findings:\n%s", formatAll(fs))
	}
	for _, f := range fs {
		if !want[f.GetRule()] {
			b.Fatalf("findings:\n%s", formatAll(fs))
		}
	}
}
