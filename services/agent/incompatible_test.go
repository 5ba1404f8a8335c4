package agent_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/codec"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// TestAgent_DesiredConfigOfNewerSchema_ReportedIncompatibleAtOnce covers
// issue 38 item 2: an agent that could not decode its desired config (a
// field of a newer schema) only quarantined it, so the coordinator waited
// for an acknowledgement until the pickup deadline and then recorded a
// good config invalid. It reports INCOMPATIBLE at once, under the config's
// fingerprint and operation, with its version and the decoder's message,
// and applies nothing; a resync reading it again writes nothing more.
func TestAgent_DesiredConfigOfNewerSchema_ReportedIncompatibleAtOnce(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	rec := &recorder{}
	logs := &logBuffer{}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, Version: "v0.9.0", Log: logs.logger(),
		ResyncInterval: 100 * time.Millisecond})

	d := desiredConfig("n1", "newer", 100)
	d.Operation = "rollout-newer/n1/apply"
	b, err := codec.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	// A field this agent's schema does not have, and the feature it needs,
	// as a newer coordinator writes them.
	b = bytes.Replace(b, []byte(`{`), []byte(`{"fromTheFuture":{"passes":2},"features":["fromTheFuture"],`), 1)
	putRaw(t, f, contract.BucketNodeConfigs, contract.DesiredKey("n1"), b)

	st := f.waitStatus(t, "n1", "INCOMPATIBLE", func(s *sluicev1.NodeStatus) bool {
		return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE
	})
	if st.GetFingerprint() != d.GetFingerprint() || st.GetOperation() != d.GetOperation() || st.GetRollout() != d.GetRollout() {
		t.Fatalf("status %v, want it about fingerprint %s, operation %s", st, d.GetFingerprint(), d.GetOperation())
	}
	if st.GetAgentVersion() != "v0.9.0" || !strings.Contains(st.GetMessage(), "v0.9.0") ||
		!strings.Contains(st.GetCheckOutput(), `unknown field "fromTheFuture"`) || !strings.Contains(st.GetMessage(), "feature(s) fromTheFuture") {
		t.Fatalf("status %v, want the agent's version and the decoder's message", st)
	}
	if rec.count() != 0 {
		t.Fatalf("applied %v, want nothing applied", rec.fingerprints())
	}
	natstest.Eventually(t, waitFor, agent.EventNodeIncompatible+" event", func() bool {
		return len(eventsOf(t, f, "n1", agent.EventNodeIncompatible)) > 0
	})
	// Read again by resyncs: nothing more is written.
	e, err := f.statuses.Get(t.Context(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	waitRereads(t, logs, "incompatible desired config read again", 0, 3)
	if e2, _ := f.statuses.Get(t.Context(), "n1"); e2.Revision != e.Revision {
		t.Fatalf("status rewritten at revision %d (was %d) by a read of the same config", e2.Revision, e.Revision)
	}

	// A config it can read is applied as usual.
	ok := desiredConfig("n1", "ok", 200)
	f.writeDesired(t, ok)
	f.waitStatus(t, "n1", "provisioned", provisioned(ok.Fingerprint))
}
