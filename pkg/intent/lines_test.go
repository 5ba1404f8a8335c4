package intent

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// An error that names a field points at the field's line, not the
// document's first (issue 42: "document 1 (line 1)" for a field on line 7).
func TestParse_ErrorPointsAtTheFieldsLine(t *testing.T) {
	file := `kind: Layer2Network
name: tenant-a
spec:
  vlan: 100
  vni: 10100
  mtu: 1450
  vrff: x
---
- kind: Layer2Network
  name: b
  spec:
    vlan: 101
    anycast_gateways: ["10.0.0.1/24", 5]
- kind: RoutingTable
  name: t
  spec:
    tableId: 100
    nodeSelector:
      matchLabels:
        topology.kubernetes.io/zone: 7
---
{"kind": "Layer2Network", "name": "j",
 "spec": {"vlan": 7,
          "vni": "x"}}
`
	_, err := Parse("f.yaml", []byte(file))
	var got []string
	for _, e := range unwrapJoined(err) {
		var pe *ParseError
		if errors.As(e, &pe) {
			got = append(got, pe.Field+"@"+strconv.Itoa(pe.Line))
		}
	}
	want := []string{"spec.vrff@7", "spec.anycastGateways[1]@13", "spec.nodeSelector.matchLabels.topology.kubernetes.io/zone@20", "spec.vni@24"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("field@line %v, want %v\n%v", got, want, err)
	}
	if !strings.Contains(err.Error(), "f.yaml: document 1 (line 7): layer2network/tenant-a: spec.vrff: unknown field") {
		t.Errorf("the message does not name line 7:\n%v", err)
	}
	// A field the tree cannot find keeps the document's first line.
	if l := (&fieldLines{data: []byte("kind: X\n"), first: 5}).line(0, "spec.vlan"); l != 0 {
		t.Errorf("a missing field: line %d, want 0 (unknown)", l)
	}
}

func unwrapJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
