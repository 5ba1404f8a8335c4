package agent_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
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

// Issue 38, item 6: the labels an agent publishes obey sluice's label rules
// (pkg/contract/labels.go), or its presence would be quarantined by every
// reader. A Node relabelled past them is refused: the node keeps the labels
// it had, and the next valid set is taken as a change from those.
func TestAgent_LabelUpdates_OverTheLimits_Refused(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 3 * time.Minute
	f := newFleet(t, s)
	updates := make(chan map[string]string) // unbuffered: each send is taken before the next
	f.start(t, agent.Config{Node: "n1", Labels: map[string]string{"zone": "a"}, LabelUpdates: updates,
		StateDir: t.TempDir(), Applier: &recorder{}})
	natstest.Eventually(t, waitFor, "presence of n1", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "a"
	})
	tooMany := map[string]string{}
	for i := range contract.MaxNodeLabels + 1 {
		tooMany[fmt.Sprintf("l%05d", i)] = "v"
	}
	for _, bad := range []map[string]string{tooMany, {"zone": strings.Repeat("b", 900_000)}, {"zone": "b\x1b]0;pwned\a"}} {
		select {
		case updates <- bad:
		case <-time.After(waitFor):
			t.Fatal("the agent does not take label updates")
		}
	}
	updates <- map[string]string{"zone": "c"}
	natstest.Eventually(t, waitFor, "the valid labels in the presence", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "c"
	})
	natstest.Eventually(t, waitFor, "a NodeLabelsChanged event from the labels kept", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeLabelsChanged && strings.Contains(ev.GetReason(), "from {zone=a} to {zone=c}")
	})
}

func TestAgentNew_LabelsOverTheLimits_Refused(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	tooMany := map[string]string{}
	for i := range 10_000 {
		tooMany[fmt.Sprintf("l%05d", i)] = "v"
	}
	_, err := agent.New(agent.Config{Conn: env.Conn, Node: "n1", Labels: tooMany, StateDir: t.TempDir(), Applier: &recorder{}})
	if want := "agent: labels: the node has 10,000 labels, over the limit of 256"; err == nil || err.Error() != want {
		t.Fatalf("New = %v, want %q", err, want)
	}
}

// Issue 44: a node that leaves outside sluice (its Kubernetes Node deleted)
// withdraws its presence at once, with a NodeLeft event naming why, and
// writes no beat while gone, so the coordinator takes it as left and the
// reaper times its absence; back, it registers again at once.
func TestAgent_Departure_WithdrawsPresenceAndRegistersAgain(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 3 * time.Second // a beat every second: one would rewrite a presence not withdrawn for good
	f := newFleet(t, s)
	departures := make(chan agent.Departure) // unbuffered: each send is taken before the next
	f.start(t, agent.Config{Node: "n1", Labels: map[string]string{"zone": "a"}, Departures: departures,
		StateDir: t.TempDir(), Applier: &recorder{}})
	ctx := context.Background()
	natstest.Eventually(t, waitFor, "presence of n1", func() bool {
		_, err := f.nodes.Get(ctx, "n1")
		return err == nil
	})
	departures <- agent.Departure{Gone: true, Reason: "its Kubernetes Node n1 was deleted"}
	// Well within the lease: withdrawn, not lapsed.
	natstest.Eventually(t, s.NodeLease/2, "n1's presence withdrawn", func() bool {
		_, err := f.nodes.Get(ctx, "n1")
		return errors.Is(err, store.ErrNotFound)
	})
	natstest.Eventually(t, waitFor, "a NodeLeft event naming why", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeLeft && strings.Contains(ev.GetReason(), "its Kubernetes Node n1 was deleted")
	})
	// Two heartbeat intervals: no beat brings it back.
	time.Sleep(2 * s.HeartbeatInterval())
	if e, err := f.nodes.Get(ctx, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("presence of a node that left: %v (err %v); want none: a beat wrote it again", e.Value, err)
	}

	departures <- agent.Departure{Reason: "its Kubernetes Node n1 was created again"}
	natstest.Eventually(t, s.NodeLease/2, "n1's presence written again", func() bool {
		e, err := f.nodes.Get(ctx, "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "a"
	})
	natstest.Eventually(t, waitFor, "a NodeRegistered event naming why", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeRegistered && strings.Contains(ev.GetReason(), "created again; registered again")
	})
}

// Issue 42, item 5: every status carries the node's labels when it was
// written, so a node that left (its presence deleted) can still be placed
// in its zone and rack by whoever reads its status (the dashboard).
func TestAgent_Status_CarriesTheNodesLabels(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 3 * time.Minute
	f := newFleet(t, s)
	updates := make(chan map[string]string, 1)
	f.start(t, agent.Config{Node: "n1", Labels: map[string]string{"zone": "a", "rack": "r1"}, LabelUpdates: updates,
		StateDir: t.TempDir(), Applier: &recorder{}})
	first := desiredConfig("n1", "one", 10)
	f.writeDesired(t, first)
	st := f.waitStatus(t, "n1", "n1 provisioned", provisioned(first.GetFingerprint()))
	if got, want := st.GetNodeLabels(), map[string]string{"zone": "a", "rack": "r1"}; !maps.Equal(got, want) {
		t.Errorf("status labels = %v, want %v (the agent's labels)", got, want)
	}

	// Relabelled: the status written next carries the new labels.
	updates <- map[string]string{"zone": "b", "rack": "r2"}
	natstest.Eventually(t, waitFor, "the new labels in the presence", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["zone"] == "b"
	})
	second := desiredConfig("n1", "two", 11)
	f.writeDesired(t, second)
	st = f.waitStatus(t, "n1", "n1 provisioned again", provisioned(second.GetFingerprint()))
	if got, want := st.GetNodeLabels(), map[string]string{"zone": "b", "rack": "r2"}; !maps.Equal(got, want) {
		t.Errorf("status labels after relabelling = %v, want %v", got, want)
	}
}
