package registry

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// decodeResource reads a kubectl-style YAML resource as the dynamic client
// hands it over (numbers as int64).
func decodeResource(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return obj
}

func kindNamed(t *testing.T, name string) kubeKind {
	t.Helper()
	kinds, err := selectKubeKinds([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	return kinds[0]
}

func wantIntent(t *testing.T, js string) *sluicev1.Intent {
	t.Helper()
	in := &sluicev1.Intent{}
	if err := protojson.Unmarshal([]byte(js), in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestKubeDocument_DasSchiff maps every field of das-schiff's two kinds:
// carried, reported as unmapped (the intent goes ahead without it), or
// refusing the resource (no intent) when leaving it out would widen it.
func TestKubeDocument_DasSchiff(t *testing.T) {
	tests := []struct {
		name         string
		kind         string
		given        string // the resource's spec, YAML
		want         string // the intent, protojson; "" = no intent
		wantUnmapped string // the fields ErrUnmapped names
		wantErr      string // a refusal's text
	}{
		{
			name: "layer2: every mapped field",
			kind: "Layer2NetworkConfiguration",
			given: `{id: 100, mtu: 9000, vni: 10100, anycastGateways: [10.0.100.1/24, "fd00::1/64"], vrf: tenant,
				nodeSelector: {matchLabels: {rack: r1}}}`,
			want: `{"name":"obj","layer2Network":{"vlan":100,"vni":10100,"mtu":9000,
				"anycastGateways":["10.0.100.1/24","fd00::1/64"],"vrf":"tenant","nodeSelector":{"matchLabels":{"rack":"r1"}}}}`,
		},
		{
			name:  "layer2: fields sluice does anyway are not reported",
			kind:  "Layer2NetworkConfiguration",
			given: `{id: 100, mtu: 1500, vni: 10100, anycastMac: "", advertiseNeighbors: false, createMacVLANInterface: false, neighSuppression: false}`,
			want:  `{"name":"obj","layer2Network":{"vlan":100,"vni":10100,"mtu":1500}}`,
		},
		{
			name: "layer2: fields sluice has no meaning for are reported",
			kind: "Layer2NetworkConfiguration",
			given: `{id: 100, mtu: 1500, vni: 10100, anycastMac: "00:00:5e:00:01:01", advertiseNeighbors: true,
				createMacVLANInterface: true, neighSuppression: true, futureField: 1}`,
			want:         `{"name":"obj","layer2Network":{"vlan":100,"vni":10100,"mtu":1500}}`,
			wantUnmapped: "spec.advertiseNeighbors, spec.anycastMac, spec.createMacVLANInterface, spec.futureField, spec.neighSuppression",
		},
		{
			name:  "layer2: a value sluice's rules refuse is carried for the configurator to refuse",
			kind:  "Layer2NetworkConfiguration",
			given: `{id: 5000, mtu: 1500, vni: 10100}`,
			want:  `{"name":"obj","layer2Network":{"vlan":5000,"vni":10100,"mtu":1500}}`,
		},
		{
			name:    "layer2: matchExpressions refuse the resource",
			kind:    "Layer2NetworkConfiguration",
			given:   `{id: 100, mtu: 1500, vni: 10100, nodeSelector: {matchExpressions: [{key: rack, operator: In, values: [r1]}]}}`,
			wantErr: "spec.nodeSelector.matchExpressions: sluice selects nodes by matchLabels only",
		},
		{
			name:  "layer2: empty matchExpressions are matchLabels alone",
			kind:  "Layer2NetworkConfiguration",
			given: `{id: 100, vni: 10100, nodeSelector: {matchLabels: {rack: r1}, matchExpressions: []}}`,
			want:  `{"name":"obj","layer2Network":{"vlan":100,"vni":10100,"nodeSelector":{"matchLabels":{"rack":"r1"}}}}`,
		},
		{
			name:    "layer2: a negative VLAN is refused naming das-schiff's field",
			kind:    "Layer2NetworkConfiguration",
			given:   `{id: -1, vni: 10100}`,
			wantErr: "spec.id: -1 is outside 0-4294967295",
		},
		{
			name:    "layer2: a wrong type is refused naming the field",
			kind:    "Layer2NetworkConfiguration",
			given:   `{id: 100, vni: 10100, anycastGateways: 10.0.0.1/24}`,
			wantErr: `spec.anycastGateways: "10.0.0.1/24" is not a list of strings`,
		},
		{
			name: "vrf route: every mapped field",
			kind: "VRFRouteConfiguration",
			given: `{vrf: tenant, seq: 10, community: "65000:100", nodeSelector: {matchLabels: {zone: a}},
				import: [{cidr: 10.1.0.0/16, ge: 24, le: 28, action: permit, seq: 5}],
				export: [{cidr: "fd00::/48", action: permit}]}`,
			want: `{"name":"obj","vrfRoute":{"vrf":"tenant","sequence":10,"community":"65000:100",
				"import":[{"cidr":"10.1.0.0/16","ge":24,"le":28}],"export":[{"cidr":"fd00::/48"}],
				"nodeSelector":{"matchLabels":{"zone":"a"}}}}`,
		},
		{
			name: "vrf route: fields sluice has no meaning for are reported",
			kind: "VRFRouteConfiguration",
			given: `{vrf: tenant, seq: 10, routeTarget: "65000:1", vni: 2001, aggregate: [10.0.0.0/8], sbrPrefixes: [10.2.0.0/16],
				loopbacks: [{name: lo.mir, subnet: 10.3.0.0/24}], import: [{cidr: 10.1.0.0/16, action: permit, weight: 3}], export: []}`,
			want:         `{"name":"obj","vrfRoute":{"vrf":"tenant","sequence":10,"import":[{"cidr":"10.1.0.0/16"}]}}`,
			wantUnmapped: "spec.aggregate, spec.import[0].weight, spec.loopbacks, spec.routeTarget, spec.sbrPrefixes, spec.vni",
		},
		{
			name:    "vrf route: a deny item refuses the resource",
			kind:    "VRFRouteConfiguration",
			given:   `{vrf: tenant, seq: 10, import: [{cidr: 10.1.0.0/16, action: permit}], export: [{cidr: 10.9.0.0/16, action: deny}]}`,
			wantErr: `spec.export[0].action: "deny": sluice leaks the prefixes`,
		},
		{
			name:    "vrf route: an item without action is refused",
			kind:    "VRFRouteConfiguration",
			given:   `{vrf: tenant, seq: 10, import: [{cidr: 10.1.0.0/16}]}`,
			wantErr: `spec.import[0].action: "": sluice leaks the prefixes`,
		},
		{
			name:    "vrf route: an item that is not an object is refused",
			kind:    "VRFRouteConfiguration",
			given:   `{vrf: tenant, seq: 10, import: [10.1.0.0/16]}`,
			wantErr: `spec.import[0]: "10.1.0.0/16" is not an object`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := decodeResource(t, "apiVersion: network.t-caas.telekom.com/v1alpha1\nkind: "+tt.kind+
				"\nmetadata: {name: obj}\nspec: "+tt.given)
			doc := kubeDocument(kindNamed(t, tt.kind), obj)
			if doc.Origin != tt.kind+"/obj" {
				t.Errorf("origin %q, want %q", doc.Origin, tt.kind+"/obj")
			}
			if tt.wantErr != "" {
				if doc.Err == nil || !strings.Contains(doc.Err.Error(), tt.wantErr) || errors.Is(doc.Err, ErrUnmapped) {
					t.Fatalf("err %v, want a refusal containing %q", doc.Err, tt.wantErr)
				}
				if len(doc.Intents) != 0 {
					t.Fatalf("a refused resource gave intents %v", doc.Intents)
				}
				return
			}
			switch {
			case tt.wantUnmapped == "" && doc.Err != nil:
				t.Fatalf("err %v, want none", doc.Err)
			case tt.wantUnmapped != "" && (doc.Err == nil || !errors.Is(doc.Err, ErrUnmapped) ||
				!strings.HasPrefix(doc.Err.Error(), tt.wantUnmapped+": ")):
				t.Fatalf("err %v, want ErrUnmapped naming %s", doc.Err, tt.wantUnmapped)
			}
			if len(doc.Intents) != 1 || !proto.Equal(doc.Intents[0], wantIntent(t, tt.want)) {
				t.Fatalf("intents %v, want %s", doc.Intents, tt.want)
			}
		})
	}
}

// TestKubeDocument_SluiceKinds: a sluice kind's spec is read as sluice
// apply -f reads an intent's; the origin names the namespace.
func TestKubeDocument_SluiceKinds(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		given   string // the resource's spec, YAML
		want    string // the intent, protojson; "" = no intent
		wantErr string
	}{
		{name: "layer2 network", kind: "Layer2Network",
			given: `{vlan: 100, vni: 10100, anycastGateways: [10.0.100.1/24], vrf: tenant, nodeSelector: {matchLabels: {rack: r1}}}`,
			want:  `{"name":"obj","layer2Network":{"vlan":100,"vni":10100,"anycastGateways":["10.0.100.1/24"],"vrf":"tenant","nodeSelector":{"matchLabels":{"rack":"r1"}}}}`},
		{name: "vrf route", kind: "VRFRoute",
			given: `{vrf: tenant, sequence: 10, import: [{cidr: 10.1.0.0/16, le: 24}], community: "65000:100"}`,
			want:  `{"name":"obj","vrfRoute":{"vrf":"tenant","sequence":10,"import":[{"cidr":"10.1.0.0/16","le":24}],"community":"65000:100"}}`},
		{name: "routing table", kind: "RoutingTable", given: `{tableId: 42}`, want: `{"name":"obj","routingTable":{"tableId":42}}`},
		{name: "an unknown field is refused naming it", kind: "RoutingTable", given: `{tableId: 42, table: 43}`,
			wantErr: "spec.table: "},
		{name: "a wrong type is refused naming the field", kind: "Layer2Network", given: `{vlan: "a hundred", vni: 10100}`,
			wantErr: "spec.vlan: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := decodeResource(t, "apiVersion: sluice.dev/v1alpha1\nkind: "+tt.kind+"\nmetadata: {name: obj, namespace: net}\nspec: "+tt.given)
			doc := kubeDocument(kindNamed(t, tt.kind), obj)
			if doc.Origin != tt.kind+"/net/obj" {
				t.Errorf("origin %q, want %q", doc.Origin, tt.kind+"/net/obj")
			}
			if tt.wantErr != "" {
				if doc.Err == nil || !strings.HasPrefix(doc.Err.Error(), tt.wantErr) || len(doc.Intents) != 0 {
					t.Fatalf("err %v, intents %v; want a refusal starting %q", doc.Err, doc.Intents, tt.wantErr)
				}
				return
			}
			if doc.Err != nil || len(doc.Intents) != 1 || !proto.Equal(doc.Intents[0], wantIntent(t, tt.want)) {
				t.Fatalf("err %v, intents %v; want %s", doc.Err, doc.Intents, tt.want)
			}
		})
	}
}
