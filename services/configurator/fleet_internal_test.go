package configurator

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestFleet_SlimKeepsWhatReadersUseOnce: the fleet view keeps of a
// presence exactly what its readers ask (labels, agent version and
// features, the config in force), drops the rest (beat and start times,
// the pause acknowledgement), and holds one copy of each label set and
// feature list however many nodes carry it.
func TestFleet_SlimKeepsWhatReadersUseOnce(t *testing.T) {
	in := &interner{sets: map[string]map[string]string{}, feats: map[string][]string{}}
	p := func(zone string) *sluicev1.NodePresence {
		return &sluicev1.NodePresence{Node: "n", Labels: map[string]string{"zone": zone, "rack": "r1"}, AgentVersion: "v1.2.0",
			ConfigFeatures: []string{"bakeChecks", "frr"}, InForceRevision: "rev", InForceFingerprint: "fp", InForceRollout: "ro",
			Pause: &sluicev1.PauseAck{Generation: 3}}
	}
	a, b, c := in.slim(p("zone-a")), in.slim(p("zone-a")), in.slim(p("zone-b"))
	want := &sluicev1.NodePresence{Labels: map[string]string{"zone": "zone-a", "rack": "r1"}, AgentVersion: "v1.2.0",
		ConfigFeatures: []string{"bakeChecks", "frr"}, InForceRevision: "rev", InForceFingerprint: "fp"}
	if a.GetAgentVersion() != want.GetAgentVersion() || !maps.Equal(a.GetLabels(), want.GetLabels()) ||
		!slices.Equal(a.GetConfigFeatures(), want.GetConfigFeatures()) || a.GetInForceRevision() != "rev" || a.GetInForceFingerprint() != "fp" {
		t.Fatalf("slim kept %v, want %v", a, want)
	}
	if a.GetPause() != nil || a.GetHeartbeatAt() != nil || a.GetStartedAt() != nil || a.GetInForceRollout() != "" {
		t.Fatalf("slim kept what no reader uses: %v", a)
	}
	if reflect.ValueOf(a.GetLabels()).UnsafePointer() != reflect.ValueOf(b.GetLabels()).UnsafePointer() {
		t.Fatal("two nodes with the same labels hold two copies of them")
	}
	if reflect.ValueOf(a.GetLabels()).UnsafePointer() == reflect.ValueOf(c.GetLabels()).UnsafePointer() {
		t.Fatal("two label sets share one copy")
	}
	if &a.GetConfigFeatures()[0] != &c.GetConfigFeatures()[0] {
		t.Fatal("two nodes with the same features hold two copies of them")
	}
	if in.labels(nil) != nil || in.features(nil) != nil {
		t.Fatal("no labels or features are kept as nil")
	}
}
