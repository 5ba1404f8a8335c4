package cli

import (
	"strings"
	"testing"
)

// Issue 42, item 12: a bad value found after the files parsed (by the
// configurator for an apply, whose FieldErrors name the intent and the
// field's path; by the CLI's own validation for a diff or a dry run) names
// the file and the line the value is written on, not the document's first;
// a field the file does not hold is placed at the intent's first line, and
// the error says so.
func TestApply_BadValueInDocument2_NamesItsLine(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenants.yaml", `kind: RoutingTable
name: mgmt
spec: {tableId: 100}
---
kind: Layer2Network
spec:
  vlan: 5000
  vni: 10200
  anycastGateways: [10.1.0.1/24]
name: tenant-b
`)
	wantVLAN := f + ": document 2 (line 7): layer2network/tenant-b: spec.vlan: 5000 is outside 1-4094"
	wantVRF := f + ": document 2 (line 5, the intent's first: spec.vrf is not in the file): layer2network/tenant-b: spec.vrf: is required"
	for _, args := range [][]string{{"apply", "-f", f}, {"diff", "-f", f}, {"apply", "--dry-run", "-f", f}} {
		t.Run(strings.Join(args[:len(args)-2], " "), func(t *testing.T) {
			code, _, stderr := sluice(t, s.URL(), args...)
			if code == 0 || !strings.Contains(stderr, wantVLAN+"\n") || !strings.Contains(stderr, wantVRF) {
				t.Errorf("exit code %d, stderr:\n%s\nwant lines\n%s\n%s", code, stderr, wantVLAN, wantVRF)
			}
		})
	}

	// A value only the whole set shows wrong (a table id a stored intent
	// has): the configurator's FieldError is on the intent the apply
	// changes, placed in its file, not on the stored one no file declares.
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "stored.yaml", "kind: RoutingTable\nname: a-stored\nspec: {tableId: 300}\n")); code != 0 {
		t.Fatalf("apply the stored intent: exit code %d: %s", code, stderr)
	}
	g := writeFile(t, "tables.yaml", `kind: RoutingTable
name: t1
spec: {tableId: 301}
---
# a second table
kind: RoutingTable
name: t2
spec:
  tableId: 300
`)
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", g)
	want := g + ": document 2 (line 9): routingtable/t2: spec.tableId: table id 300 is used by 2 routing tables whose node selectors can match the same node: routingtable/a-stored, routingtable/t2"
	if code != 1 || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "\nroutingtable/") {
		t.Errorf("exit code %d, stderr:\n%s\nwant 1 and a first line starting %q", code, stderr, want)
	}
}
