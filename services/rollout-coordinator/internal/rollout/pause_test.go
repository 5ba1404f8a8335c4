package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func paused(gen uint64, joiners string) *sluicev1.PauseRequest {
	return &sluicev1.PauseRequest{Paused: true, Generation: gen, By: "ops", Reason: "maintenance", Joiners: joiners}
}

func resumed(gen uint64) *sluicev1.PauseRequest {
	return &sluicev1.PauseRequest{Paused: false, Generation: gen, By: "ops"}
}

// lastAck is the last acknowledgement handed to the loop in acts.
func lastAck(acts []Action) (*sluicev1.PauseAck, bool) {
	var ack *sluicev1.PauseAck
	for _, a := range acts {
		if a, ok := a.(AckPause); ok {
			ack = a.Ack
		}
	}
	return ack, ack != nil
}

// written names the nodes acts write.
func written(acts []Action) []string {
	var out []string
	for _, w := range writes(acts) {
		out = append(out, w.Desired.GetNode())
	}
	return out
}

// The control plane's pause holds a running rollout: nodes in flight
// finish, none starts, the coordinator acknowledges once none runs, and
// resume carries on where it stopped.
func TestDecide_ControlPlanePause_HoldsTheRolloutUntilResume(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, "1"))
	s := NewState()
	Decide(s, Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1, Presence: presence("n1", "n2", "n3"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	Decide(s, Written{Node: "n1", Fingerprint: fp1}, t0)
	Decide(s, Status{S: status("n1", inProgress, fp1, id1)}, t0) // n1's agent is applying

	acts := Decide(s, PauseChanged{R: paused(1, "")}, t0.Add(time.Second))
	ack, _ := lastAck(acts)
	if ack.GetGeneration() != 0 || !strings.Contains(ack.GetWaitingFor(), "1 node operation(s) in flight ([n1])") || ack.GetSeen() != 1 {
		t.Fatalf("ack while n1 applies = %v; want generation 1 not reached, waiting for n1", ack)
	}
	acts = Decide(s, Status{S: status("n1", provisioned, fp1, id1)}, t0.Add(2*time.Second))
	if w := written(acts); len(w) != 0 {
		t.Fatalf("writes while paused: %v; want none", w)
	}
	if ack, ok := lastAck(acts); !ok || ack.GetGeneration() != 1 || !ack.GetPaused() || ack.GetWaitingFor() != "" {
		t.Fatalf("ack once n1 reported = %v; want generation 1 reached, paused", ack)
	}
	// Time passes: no deadline runs out, the progress clock stands still.
	Decide(s, Tick{}, t0.Add(3*time.Hour))
	if s.rollout == nil || s.elapsed(t0.Add(3*time.Hour)) > 3*time.Second {
		t.Fatalf("rollout %v, elapsed %s after 3h paused; want it running, clock stopped", s.rollout.GetPhase(), s.elapsed(t0.Add(3*time.Hour)))
	}
	acts = Decide(s, PauseChanged{R: resumed(2)}, t0.Add(3*time.Hour))
	if w := written(acts); !slices.Equal(w, []string{"n2"}) {
		t.Fatalf("writes at resume: %v; want n2 (maxParallel 1)", w)
	}
	if ack, _ := lastAck(acts); ack.GetGeneration() != 2 || ack.GetPaused() {
		t.Fatalf("ack at resume = %v; want generation 2 reached at once, running", ack)
	}
}

// Under the control plane's pause an agent holds a config it had not
// started: the node is not late, and not counted as running.
func TestDecide_ControlPlanePause_ANodeHeldAtItsAgentIsNotLate(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, "2"))
	st := &sluicev1.Strategy{MaxParallel: "2", PickupDeadline: durationOf(time.Minute), ApplyDeadline: durationOf(time.Hour)}
	s := NewState()
	Decide(s, Loaded{Head: withStrategy(head(2, r1.Id, "2"), st), HeadRev: r1, Presence: presence("n1", "n2", "n3"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	Decide(s, Written{Node: "n1", Fingerprint: fp1}, t0)
	Decide(s, Written{Node: "n2", Fingerprint: fp1}, t0)
	Decide(s, Status{S: status("n1", inProgress, fp1, id1)}, t0)

	acts := Decide(s, PauseChanged{R: paused(1, "")}, t0)
	if ack, _ := lastAck(acts); !strings.Contains(ack.GetWaitingFor(), "[n1]") {
		t.Fatalf("ack = %v; want waiting for n1 only (n2's agent holds its config)", ack)
	}
	acts = Decide(s, Tick{}, t0.Add(10*time.Minute))
	if got := summarize(acts); slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("actions after 10m paused: %v; want no pickup timeout", got)
	}
	// Resumed: n2's pickup deadline starts again.
	Decide(s, PauseChanged{R: resumed(2)}, t0.Add(10*time.Minute))
	if got := summarize(Decide(s, Tick{}, t0.Add(10*time.Minute+30*time.Second))); slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("actions 30s after resume: %v; want none timed out yet", got)
	}
	if got := summarize(Decide(s, Tick{}, t0.Add(11*time.Minute+time.Second))); !slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("actions a minute after resume: %v; want n2 timed out", got)
	}
}

// A rollout's own pause: acknowledged in its record with events; the rest
// of the control plane is not paused.
func TestDecide_RolloutPause_AcknowledgedInTheRecord(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, "1"))
	s := NewState()
	Decide(s, Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1, Presence: presence("n1", "n2"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	Decide(s, Written{Node: "n1", Fingerprint: fp1}, t0)

	req := paused(1, "")
	req.Rollout = id1
	acts := Decide(s, RolloutPauseChanged{R: req}, t0)
	if got := summarize(acts); !slices.Equal(got, []string{"emit RolloutPausing"}) {
		t.Fatalf("actions = %v; want RolloutPausing (n1 in flight)", got)
	}
	if _, ok := lastAck(acts); ok {
		t.Fatal("the control plane's acknowledgement moved for a rollout's pause")
	}
	acts = Decide(s, Status{S: status("n1", provisioned, fp1, id1)}, t0.Add(time.Second))
	if got := summarize(acts); !slices.Equal(got, []string{"emit RolloutPaused"}) {
		t.Fatalf("actions = %v; want RolloutPaused and no write", got)
	}
	if a := s.rollout.GetPauseAck(); a.GetGeneration() != 1 || !a.GetPaused() {
		t.Fatalf("record ack = %v; want generation 1 paused", a)
	}
	other := paused(1, "")
	other.Rollout = "9-another"
	if got := summarize(Decide(s, RolloutPauseChanged{R: other}, t0.Add(time.Second))); len(got) != 0 {
		t.Fatalf("another rollout's pause: %v; want nothing", got)
	}
	res := resumed(2)
	res.Rollout = id1
	if got := summarize(Decide(s, RolloutPauseChanged{R: res}, t0.Add(2*time.Second))); !slices.Equal(got, []string{"write n2", "emit RolloutUnpaused"}) {
		t.Fatalf("actions at resume = %v; want n2 written", got)
	}
}

// Nodes that join while the control plane is paused: freeze gives them
// nothing until resume; last-good gives a never-configured node the last
// applied revision.
func TestDecide_ControlPlanePause_Joiners(t *testing.T) {
	r0 := testRev("0000aaaa")
	fp0 := targetOf(r0)
	idle := Loaded{Presence: presence("n1"), LastApplied: &sluicev1.RolloutRef{Rollout: "1-r0", Revision: r0.Id, Generation: 1}, LastAppliedRev: r0,
		Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp0, Revision: r0.Id}}}
	joined := func(n string) Event { return Presence{Node: n, P: presence(n)[0]} }
	tests := []struct {
		name     string
		pause    *sluicev1.PauseRequest
		event    Event
		want     []string
		atResume []string
	}{
		{"freeze: a new node gets nothing until resume", paused(1, "freeze"), joined("n9"), nil, []string{"write n9", "emit NodeConfigured"}},
		{"last-good: a new node gets the last applied revision", paused(1, "last-good"), joined("n9"), []string{"write n9", "emit NodeConfigured"}, nil},
		{"not paused: a new node gets the last applied revision", resumed(1), joined("n9"), []string{"write n9", "emit NodeConfigured"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			Decide(s, idle, t0)
			Decide(s, PauseChanged{R: tc.pause}, t0)
			if got := summarize(Decide(s, tc.event, t0)); !slices.Equal(got, tc.want) {
				t.Fatalf("actions = %v; want %v", got, tc.want)
			}
			if got := summarize(Decide(s, PauseChanged{R: resumed(2)}, t0)); !slices.Equal(got, tc.atResume) {
				t.Fatalf("actions at resume = %v; want %v", got, tc.atResume)
			}
		})
	}
}

// A pause read at load (a new leader) holds the head's rollout from its start.
func TestDecide_PauseFoundAtLoad_StartsTheRolloutHeld(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	s := NewState()
	acts := Decide(s, Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1, Presence: presence("n1", "n2"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0, Pause: paused(4, "")}, t0)
	if got := summarize(acts); !slices.Equal(got, []string{"start " + rolloutID(head(2, r1.Id, "1")), "emit RolloutStarted"}) {
		t.Fatalf("actions = %v; want the rollout started, no node written", got)
	}
	if ack, ok := lastAck(acts); !ok || ack.GetGeneration() != 4 || !ack.GetPaused() {
		t.Fatalf("ack = %v; want generation 4 reached at once (nothing in flight)", ack)
	}
}

// An agent restarted mid-apply while the control plane is paused holds the
// operation it was running: once its presence says it reached the pause,
// the node is neither running (the coordinator acknowledges) nor late
// (chaos seeds 1, 92, 110, 137, 154, 187), and at resume its deadlines
// start again.
func TestDecide_ControlPlanePause_AnAgentThatReachedThePauseHoldsItsOperation(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	st := &sluicev1.Strategy{MaxParallel: "1", PickupDeadline: durationOf(10 * time.Second), ApplyDeadline: durationOf(5 * time.Second)}
	h := withStrategy(head(2, r1.Id, "1"), st)
	id1 := rolloutID(h)
	s := NewState()
	Decide(s, Loaded{Head: h, HeadRev: r1, Presence: presence("n1", "n2"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	Decide(s, Written{Node: "n1", Fingerprint: fp1}, t0)
	Decide(s, Status{S: status("n1", inProgress, fp1, id1)}, t0) // acknowledged, then its agent is killed
	acts := Decide(s, PauseChanged{R: paused(1, "")}, t0.Add(time.Second))
	if ack, _ := lastAck(acts); ack.GetGeneration() == 1 {
		t.Fatalf("ack = %v; want generation 1 not reached while n1 may be applying", ack)
	}
	// Restarted, its agent holds the operation and reaches the pause.
	p := presence("n1")[0]
	p.Pause = &sluicev1.PauseAck{Generation: 1, Paused: true, Seen: 1}
	acts = Decide(s, Presence{Node: "n1", P: p}, t0.Add(2*time.Second))
	if ack, ok := lastAck(acts); !ok || ack.GetGeneration() != 1 {
		t.Fatalf("ack = %v; want generation 1 reached: n1's agent is idle", ack)
	}
	if got := summarize(Decide(s, Tick{}, t0.Add(time.Minute))); slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("actions a minute into the pause: %v; want no timeout", got)
	}
	Decide(s, PauseChanged{R: resumed(2)}, t0.Add(time.Minute))
	if got := summarize(Decide(s, Tick{}, t0.Add(time.Minute+6*time.Second))); slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("actions 6s after resume: %v; want none: its agent has 10s to pick the operation up again", got)
	}
	Decide(s, Status{S: status("n1", inProgress, fp1, id1)}, t0.Add(time.Minute+7*time.Second))
	if got := summarize(Decide(s, Status{S: status("n1", provisioned, fp1, id1)}, t0.Add(time.Minute+8*time.Second))); !slices.Contains(got, "write n2") {
		t.Fatalf("actions once n1 provisioned: %v; want n2 started", got)
	}
}
