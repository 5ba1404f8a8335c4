package intent_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestKindKeyAndID(t *testing.T) {
	tests := []struct {
		name          string
		given         *sluicev1.Intent
		kind, key, id string
	}{
		{"layer2", l2("tenant-a", nil), "Layer2Network", "layer2network.tenant-a", "layer2network/tenant-a"},
		{"vrf route", vrf("leak", nil), "VRFRoute", "vrfroute.leak", "vrfroute/leak"},
		{"routing table", table("t100", nil), "RoutingTable", "routingtable.t100", "routingtable/t100"},
		{"no spec", &sluicev1.Intent{Name: "x"}, "", ".x", "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := intent.Kind(tt.given); got != tt.kind {
				t.Errorf("Kind = %q, want %q", got, tt.kind)
			}
			if got := intent.Key(tt.given); got != tt.key {
				t.Errorf("Key = %q, want %q", got, tt.key)
			}
			if got := intent.ID(tt.given); got != tt.id {
				t.Errorf("ID = %q, want %q", got, tt.id)
			}
		})
	}
}

func TestParseKind(t *testing.T) {
	tests := []struct {
		given   string
		want    string
		wantErr string
	}{
		{"Layer2Network", "Layer2Network", ""},
		{"layer2network", "Layer2Network", ""},
		{"VRFROUTE", "VRFRoute", ""},
		{"routingTable", "RoutingTable", ""},
		{"Bridge", "", `unknown kind "Bridge": use one of Layer2Network, RoutingTable, VRFRoute`},
		{"", "", "kind is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.given, func(t *testing.T) {
			got, err := intent.ParseKind(tt.given)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseKind(%q) error = %v, want %q", tt.given, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseKind(%q) = %q, %v; want %q", tt.given, got, err, tt.want)
			}
		})
	}
}

func TestParseKey_RoundTripsKey(t *testing.T) {
	for _, in := range []*sluicev1.Intent{l2("tenant-a", nil), vrf("leak", nil), table("t1", nil)} {
		kind, name, err := intent.ParseKey(intent.Key(in))
		if err != nil || kind != intent.Kind(in) || name != in.GetName() {
			t.Errorf("ParseKey(%q) = %q, %q, %v", intent.Key(in), kind, name, err)
		}
	}
	for _, bad := range []string{"head", "bridge.x", "layer2network."} {
		if _, _, err := intent.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) succeeded, want an error", bad)
		}
	}
}

func TestWithoutSelector_CopiesAndLeavesTheOriginal(t *testing.T) {
	in := l2("a", nil)
	out := intent.WithoutSelector(in)
	if intent.Selector(out) != nil {
		t.Errorf("copy still has selector %v", intent.Selector(out))
	}
	if intent.Selector(in).GetMatchLabels()["zone"] != "zone-a" {
		t.Errorf("original lost its selector")
	}
}
