package view

import (
	"encoding/json"
	"reflect"
	"testing"
)

// raw is s as a JSON value.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestSpecFields(t *testing.T) {
	for _, tt := range []struct {
		name     string
		from, to string
		want     []FieldChange
	}{
		{name: "one field", from: `{"layer2Network":{"vlan":100,"vni":10100}}`, to: `{"layer2Network":{"vlan":200,"vni":10100}}`,
			want: []FieldChange{{Path: "spec.vlan", From: raw("100"), To: raw("200")}}},
		{name: "set and unset", from: `{"layer2Network":{"vlan":100,"vrf":"a"}}`, to: `{"layer2Network":{"vlan":100,"mtu":9000}}`,
			want: []FieldChange{{Path: "spec.mtu", To: raw("9000")}, {Path: "spec.vrf", From: raw(`"a"`)}}},
		{name: "a list item", from: `{"layer2Network":{"anycastGateways":["10.0.0.1/24","fd00::1/64"]}}`,
			to:   `{"layer2Network":{"anycastGateways":["10.0.0.1/24","fd00::2/64"]}}`,
			want: []FieldChange{{Path: "spec.anycastGateways[1]", From: raw(`"fd00::1/64"`), To: raw(`"fd00::2/64"`)}}},
		{name: "a list that grew is one change", from: `{"vrfRoute":{"export":[{"cidr":"10.0.0.0/24"}]}}`,
			to:   `{"vrfRoute":{"export":[{"cidr":"10.0.0.0/24"},{"cidr":"10.0.1.0/24","le":32}]}}`,
			want: []FieldChange{{Path: "spec.export", From: raw(`[{"cidr":"10.0.0.0/24"}]`), To: raw(`[{"cidr":"10.0.0.0/24"},{"cidr":"10.0.1.0/24","le":32}]`)}}},
		{name: "a field inside a list item", from: `{"vrfRoute":{"export":[{"cidr":"10.0.0.0/24","le":24}]}}`,
			to:   `{"vrfRoute":{"export":[{"cidr":"10.0.0.0/24","le":28}]}}`,
			want: []FieldChange{{Path: "spec.export[0].le", From: raw("24"), To: raw("28")}}},
		{name: "a label with dots", from: `{"routingTable":{"tableId":7,"nodeSelector":{"matchLabels":{"topology.kubernetes.io/zone":"a"}}}}`,
			to:   `{"routingTable":{"tableId":7,"nodeSelector":{"matchLabels":{"topology.kubernetes.io/zone":"b"}}}}`,
			want: []FieldChange{{Path: "spec.nodeSelector.matchLabels.topology.kubernetes.io/zone", From: raw(`"a"`), To: raw(`"b"`)}}},
		{name: "large numbers as written", from: `{"routingTable":{"tableId":4294967295}}`, to: `{"routingTable":{"tableId":4294967294}}`,
			want: []FieldChange{{Path: "spec.tableId", From: raw("4294967295"), To: raw("4294967294")}}},
		{name: "the same spec", from: `{"routingTable":{"tableId":7}}`, to: `{"routingTable":{"tableId":7}}`},
		{name: "unreadable", from: `?`, to: `{"routingTable":{"tableId":7}}`,
			want: []FieldChange{{Path: "spec", From: raw(`"?"`), To: raw(`{"routingTable":{"tableId":7}}`)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := SpecFields(tt.from, tt.to); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SpecFields\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
