package intent_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// tablesSharingOneID is n routing tables that all claim table id 100 on every node.
func tablesSharingOneID(n int) []*sluicev1.Intent {
	out := make([]*sluicev1.Intent, n)
	for i := range out {
		out[i] = table(fmt.Sprintf("t%05d", i), nil)
	}
	return out
}

// BenchmarkValidate_3000RoutingTablesSharingOneTableID measures the conflict
// check at the size that ran the configurator out of memory (issue 9, item 14).
// Run: go test ./pkg/intent -run '^$' -bench Validate -benchmem
func BenchmarkValidate_3000RoutingTablesSharingOneTableID(b *testing.B) {
	ins := tablesSharingOneID(3000)
	b.ReportAllocs()
	for b.Loop() {
		if errs := intent.Validate(ins); len(errs) == 0 {
			b.Fatal("no conflict reported")
		}
	}
}

// BenchmarkValidate_3000RoutingTablesOnePerNode: the same table id on 3,000
// tables that each select their own node, so nothing conflicts.
func BenchmarkValidate_3000RoutingTablesOnePerNode(b *testing.B) {
	ins := tablesSharingOneID(3000)
	for i, in := range ins {
		in.GetRoutingTable().NodeSelector = sel("kubernetes.io/hostname", fmt.Sprintf("node-%d", i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if errs := intent.Validate(ins); len(errs) != 0 {
			b.Fatalf("%d errors, want none", len(errs))
		}
	}
}
