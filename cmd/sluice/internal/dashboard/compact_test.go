package dashboard

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fleetOf is n nodes mid-rollout in 3 zones of 40 racks, as the services
// write them.
func fleetOf(n int) *state {
	s := newState()
	s.groupBy = []string{"zone", "rack"}
	now := timestamppb.New(time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC))
	for i := range n {
		name := fmt.Sprintf("node-%06d", i)
		s.presences[name] = &sluicev1.NodePresence{Node: name, AgentVersion: "v0.9.0", StartedAt: now, HeartbeatAt: now,
			Labels: map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3), "rack": fmt.Sprintf("rack-%d", 1+i/3%40), "hostname": name}}
		phase, rev := sluicev1.NodePhase_NODE_PHASE_PROVISIONED, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
		if i%10 == 0 {
			phase, rev = sluicev1.NodePhase_NODE_PHASE_PROVISIONING, "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
		}
		s.statuses[name] = &sluicev1.NodeStatus{Node: name, Phase: phase, Revision: rev, Rollout: "7-60303ae22b99", Fingerprint: "3f1c0e5a9d2b",
			AppliedFingerprint: "3f1c0e5a9d2b", LastUpdate: now, ApplyStartedAt: now, Operation: "7-60303ae22b99/" + name + "/apply", Message: "applied and healthy"}
	}
	return s
}

func sizes(t *testing.T, v any) (raw, zipped int) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	_, _ = w.Write(b)
	_ = w.Close()
	return len(b), z.Len()
}

// TestSnapshot_100000Nodes_IsCompact: a viewer's first update at 100,000
// nodes is a few megabytes of JSON, not every node's full object (nomad
// #23880's page broke on a 21 MB payload).
func TestSnapshot_100000Nodes_IsCompact(t *testing.T) {
	const n, limit = 100_000, 4 << 20
	s := fleetOf(n)
	began := time.Now()
	u, err := s.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	raw, zipped := sizes(t, u)
	if len(u.Fleet.Names) != n || len(u.Fleet.Present) != n || len(u.Fleet.Domains) != 121 {
		t.Fatalf("the snapshot holds %d names, %d present flags, %d domains; want %d, %d and 121 (120 racks and none)", len(u.Fleet.Names), len(u.Fleet.Present), len(u.Fleet.Domains), n, n)
	}
	// Every node's full object, as the snapshot sent before, for 10,000 of them.
	full, err := view.NodeObjects(fleetOf(n / 10).fleet())
	if err != nil {
		t.Fatal(err)
	}
	fullRaw, fullZipped := sizes(t, full)
	t.Logf("snapshot of %d nodes: %.2f MB of JSON (%.2f MB gzipped), built in %v; every node's full object would be about %.1f MB (%.2f MB gzipped)",
		n, float64(raw)/1e6, float64(zipped)/1e6, took.Round(time.Millisecond), float64(fullRaw)*10/1e6, float64(fullZipped)*10/1e6)
	if raw > limit {
		t.Errorf("snapshot of %d nodes: %d bytes of JSON, want at most %d", n, raw, limit)
	}
}
