package intent_test

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
)

// The repository's examples/ are what the README tour applies; they must
// stay valid, and examples/broken must fail for the reasons the tour shows.

func TestExamples_ParseAndValidateTogether(t *testing.T) {
	got, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatalf("parse examples: %v", err)
	}
	if len(got) != 7 {
		t.Errorf("examples hold %d intents, want 7 (3 networks, 2 tables, 2 VRF routes)", len(got))
	}
	checkErrors(t, intent.Validate(got), nil)
}

func TestExamples_BrokenFailsWithTheDocumentedErrors(t *testing.T) {
	got, err := intent.ParseFiles("../../examples/broken")
	if err != nil {
		t.Fatalf("examples/broken should parse (its problems are for validation): %v", err)
	}
	checkErrors(t, intent.Validate(got), []wantErr{
		{"layer2network/tenant-c", "spec.anycastGateways[0]", `"10.0.300.1/24" is not an address in CIDR form`},
		{"layer2network/tenant-c", "spec.vlan", "5000 is outside 1-4094"},
		{"routingtable/main-copy", "spec.tableId", "254 is reserved for the kernel's main table"},
	})
}
