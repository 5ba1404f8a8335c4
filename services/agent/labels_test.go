package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/services/agent"
)

// Labels that change while the agent runs (a Kubernetes Node relabelled)
// reach its presence at once, with an event naming old and new.
func TestAgent_LabelUpdates_PublishedAtOnce(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 3 * time.Minute // a beat every minute: none falls within the wait below
	f := newFleet(t, s)
	updates := make(chan map[string]string, 1)
	f.start(t, agent.Config{Node: "n1", Labels: map[string]string{"zone": "a"}, LabelUpdates: updates,
		StateDir: t.TempDir(), Applier: &recorder{}})
	natstest.Eventually(t, waitFor, "presence of n1", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "a"
	})
	updates <- map[string]string{"zone": "b", "rack": "r2"}
	// Margin: half a heartbeat interval (30s) is far more than a write takes,
	// and the next beat is a minute away, so the change did not wait for it.
	natstest.Eventually(t, s.HeartbeatInterval()/2, "the new labels in the presence", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "b" && e.Value.GetLabels()["rack"] == "r2"
	})
	// Events are stored apart from the presence: the event may trail it.
	natstest.Eventually(t, waitFor, "a NodeLabelsChanged event naming old and new labels", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeLabelsChanged && strings.Contains(ev.GetReason(), "{zone=a} to {rack=r2,zone=b}")
	})
}
