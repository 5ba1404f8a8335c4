package intent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestWhere_FieldErrorsNameTheFileAndTheFieldsLine: a problem found once
// the files parsed (Validate's, the configurator's for an apply) says where
// its intent is declared as a parse error does: the file, the document (and
// item of a list), and the line of the field, or of the intent when the
// field is not written, saying so.
func TestWhere_FieldErrorsNameTheFileAndTheFieldsLine(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.json")
	for name, content := range map[string]string{
		a: `# two documents
kind: Layer2Network
name: tenant-a
spec:
  vni: 10100
  vlan: 5000
---
- kind: RoutingTable
  name: t1
  spec: {tableId: 7}
- kind: Layer2Network
  name: tenant-c
  spec:
    vlan: 101
    vni: 10102
    anycastGateways: [10.0.0.1/33]
`,
		b: "{\"kind\": \"RoutingTable\",\n \"name\": \"main-copy\",\n \"spec\": {\"tableId\": 254}}\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	intents, where, err := intent.ParseFilesWhere(dir)
	if err != nil || len(intents) != 4 {
		t.Fatalf("ParseFilesWhere: %d intents, %v", len(intents), err)
	}
	got := map[string]bool{}
	for _, fe := range intent.Validate(intents) {
		got[where.Format(fe)] = true
	}
	for _, want := range []string{
		a + `: document 1 (line 6): layer2network/tenant-a: spec.vlan: 5000 is outside 1-4094`,
		a + `: document 2 item 2 (line 16): layer2network/tenant-c: spec.anycastGateways[0]: "10.0.0.1/33" is not an address in CIDR form like 10.0.0.1/24`,
		a + `: document 2 item 2 (line 11, the intent's first: spec.vrf is not in the file): layer2network/tenant-c: spec.vrf: is required when anycastGateways are set: the VRF the gateways route in`,
		b + `: document 1 (line 3): routingtable/main-copy: spec.tableId: 254 is reserved for the kernel's main table; pick another id`,
	} {
		if !got[want] {
			t.Errorf("no %q in %v", want, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("%d problems, want 4: %v", len(got), got)
	}
	// An intent the files do not declare (a stored one), and no Where: the problem alone.
	stored := &sluicev1.FieldError{Intent: "routingtable/stored", Field: "spec.tableId", Rule: "taken"}
	var none *intent.Where
	if g, n := where.Format(stored), none.Format(stored); g != "routingtable/stored: spec.tableId: taken" || n != g {
		t.Errorf("got %q and %q, want the problem alone", g, n)
	}
}
