package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// testRev has one network for zone a and one table for every node, so nodes
// in different zones get different configs.
func testRev(id string) *sluicev1.Revision {
	return &sluicev1.Revision{Id: id, Intents: []*sluicev1.Intent{
		{Name: "net-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: 100, Vni: 10100, NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": "a"}}}}},
		{Name: "tbl-" + id, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}},
	}}
}

func head(gen uint64, rev, maxPar string) *sluicev1.Head {
	return &sluicev1.Head{Revision: rev, Generation: gen, Strategy: &sluicev1.Strategy{MaxParallel: maxPar}, Reason: "test"}
}

func presence(names ...string) []*sluicev1.NodePresence {
	var ps []*sluicev1.NodePresence
	for _, n := range names {
		// As an agent of this version states it: it reads every feature.
		ps = append(ps, &sluicev1.NodePresence{Node: n, Labels: map[string]string{"zone": "a"}, ConfigFeatures: contract.ConfigFeatures})
	}
	return ps
}

// targetOf is the fingerprint rev renders to for a zone-a node.
func targetOf(rev *sluicev1.Revision) string {
	return render.Fingerprint(render.NodeConfig(rev, map[string]string{"zone": "a"}))
}

func status(node string, phase sluicev1.NodePhase, fp, rollout string) *sluicev1.NodeStatus {
	return &sluicev1.NodeStatus{Node: node, Phase: phase, Fingerprint: fp, Rollout: rollout, Message: "msg", FailedCheck: "ping"}
}

const (
	provisioned = sluicev1.NodePhase_NODE_PHASE_PROVISIONED
	invalid     = sluicev1.NodePhase_NODE_PHASE_INVALID
	inProgress  = sluicev1.NodePhase_NODE_PHASE_PROVISIONING
)

// summarize renders actions as short strings; progress saves are left out.
func summarize(acts []Action) []string {
	var out []string
	for _, a := range acts {
		switch a := a.(type) {
		case WriteDesired:
			out = append(out, "write "+a.Desired.GetNode())
			for _, e := range a.Events {
				out = append(out, "emit "+e.GetType())
			}
		case StartRollout:
			out = append(out, "start "+a.Rollout.GetId())
		case FinishRollout:
			if a.Rollout == nil {
				out = append(out, "finish (record kept)")
				break
			}
			out = append(out, "finish "+phaseWord(a.Rollout.GetPhase()))
		case RecordInvalid:
			out = append(out, "record "+a.Fingerprint.GetNode())
		case ForgiveInvalid:
			out = append(out, "forgive "+a.Fingerprint.GetNode())
		case Emit:
			out = append(out, "emit "+a.Event.GetType())
		}
	}
	return out
}

func counts(s *State) string {
	if s.rollout == nil {
		return "no rollout"
	}
	c := s.rollout.Counts
	out := fmt.Sprintf("total=%d pending=%d inprogress=%d provisioned=%d failed=%d skipped=%d",
		c.GetTotal(), c.GetPending(), c.GetInProgress(), c.GetProvisioned(), c.GetFailed(), c.GetSkipped())
	if c.GetTimedOut()+c.GetReverting()+c.GetReverted() > 0 {
		out += fmt.Sprintf(" timedout=%d reverting=%d reverted=%d", c.GetTimedOut(), c.GetReverting(), c.GetReverted())
	}
	return out
}

func withStrategy(h *sluicev1.Head, st *sluicev1.Strategy) *sluicev1.Head {
	h.Strategy = st
	return h
}

var emptyFP = render.Fingerprint(&sluicev1.NodeConfig{})

// decideCase is one row of the Decide tables: events given, the event
// under test, the actions it returns (summarize) and the counts after.
type decideCase struct {
	name       string
	given      []Event // applied before the Event under test
	event      Event
	want       []string
	wantCounts string
	check      func(t *testing.T, s *State)
}

// The revisions, targets and rollout ids the Decide tables share.
var (
	r1, r2   = testRev("aaaa1111"), testRev("bbbb2222")
	fp1, fp2 = targetOf(r1), targetOf(r2)
	id1, id2 = rolloutID(head(1, r1.Id, "")), rolloutID(head(2, r2.Id, ""))
)

// loaded is a term's load of head h (revision rev) with nodes present.
func loaded(h *sluicev1.Head, rev *sluicev1.Revision, nodes ...string) Loaded {
	return Loaded{Head: h, HeadRev: rev, Presence: presence(nodes...)}
}

// runDecide runs each case on a fresh state: the given events at t0, the
// event under test a second later.
func runDecide(t *testing.T, tests []decideCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			for _, ev := range tc.given {
				Decide(s, ev, t0)
			}
			got := summarize(Decide(s, tc.event, t0.Add(time.Second)))
			if !slices.Equal(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if tc.wantCounts != "" && counts(s) != tc.wantCounts {
				t.Errorf("counts:\n got  %s\n want %s", counts(s), tc.wantCounts)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// TestDecide_Scheduling: how nodes are started: maxParallel, slots, the order.
func TestDecide_Scheduling(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name:       "new head starts a rollout and fills maxParallel slots in name order",
			event:      loaded(head(1, r1.Id, "2"), r1, "n3", "n1", "n2"),
			want:       []string{"start " + id1, "write n1", "write n2", "emit RolloutStarted"},
			wantCounts: "total=3 pending=1 inprogress=2 provisioned=0 failed=0 skipped=0",
		},
		{
			name:       "maxParallel as a percentage rounds up",
			event:      loaded(head(1, r1.Id, "50%"), r1, "n1", "n2", "n3"),
			want:       []string{"start " + id1, "write n1", "write n2", "emit RolloutStarted"},
			wantCounts: "total=3 pending=1 inprogress=2 provisioned=0 failed=0 skipped=0",
		},
		{
			name:       "a provisioned node frees its slot for the next",
			given:      []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3")},
			event:      Status{S: status("n1", provisioned, fp1, id1)},
			want:       []string{"write n3"},
			wantCounts: "total=3 pending=0 inprogress=2 provisioned=1 failed=0 skipped=0",
		},
		{
			name:  "nodes already running the target are counted provisioned and not rewritten",
			event: Loaded{Head: head(1, r1.Id, "5"), HeadRev: r1, Presence: presence("n1", "n2"), Status: []*sluicev1.NodeStatus{status("n1", provisioned, fp1, "old")}, Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1}}},
			want:  []string{"start " + id1, "write n2", "emit RolloutStarted"}, wantCounts: "total=2 pending=0 inprogress=1 provisioned=1 failed=0 skipped=0",
		},
	})
}

// TestDecide_Outcomes: what a node's report does.
func TestDecide_Outcomes(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name:  "a report for another fingerprint is ignored",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event: Status{S: status("n1", provisioned, "other", id1)},
			want:  nil, wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
		{
			name:  "provisioning is not an outcome",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event: Status{S: status("n1", inProgress, fp1, id1)},
			want:  nil, wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
		{
			name:  "the last outcome ends the rollout Succeeded and moves last-applied",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1")},
			event: Status{S: status("n1", provisioned, fp1, id1)},
			want:  []string{"finish Succeeded", "emit RolloutSucceeded"},
			check: func(t *testing.T, s *State) {
				if s.rollout != nil || s.lastApplied.GetRevision() != r1.Id || s.lastApplied.GetGeneration() != 1 {
					t.Fatalf("rollout=%v lastApplied=%v", s.rollout, s.lastApplied)
				}
			},
		},
		{
			name: "a failure within the failure budget continues and ends PartiallyFailed",
			given: []Event{loaded(withStrategy(head(1, r1.Id, "1"), &sluicev1.Strategy{MaxParallel: "1", FailureBudget: "1"}), r1, "n1", "n2"),
				Status{S: status("n1", invalid, fp1, id1)}},
			event: Status{S: status("n2", provisioned, fp1, id1)},
			want:  []string{"finish PartiallyFailed", "emit RolloutPartiallyFailed"},
			check: func(t *testing.T, s *State) {
				if s.lastApplied.GetRevision() != r1.Id {
					t.Fatalf("a partially failed revision is in force and becomes last-applied; got %v", s.lastApplied)
				}
			},
		},
		{
			name:  "a rollout with no nodes succeeds at once",
			event: loaded(head(1, r1.Id, ""), r1),
			want:  []string{"start " + id1, "finish Succeeded", "emit RolloutStarted", "emit RolloutSucceeded"},
		},
	})
}

// TestDecide_Revert: a failure over budget and the revert that follows.
func TestDecide_Revert(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name:       "an invalid node over budget records its fingerprint and reverts every touched node",
			given:      []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3")},
			event:      Status{S: status("n1", invalid, fp1, id1)},
			want:       []string{"record n1", "write n1", "emit NodeRevertTarget", "write n2", "emit NodeRevertTarget", "emit NodeFailed", "emit FingerprintInvalid", "emit RolloutReverting"},
			wantCounts: "total=3 pending=0 inprogress=0 provisioned=0 failed=1 skipped=0 timedout=0 reverting=2 reverted=0",
			check: func(t *testing.T, s *State) {
				f := s.rollout.GetFailures()
				if len(f) != 1 || f[0].GetNode() != "n1" || f[0].GetFailedCheck() != "ping" || f[0].GetFingerprint() != fp1 {
					t.Fatalf("failures = %v", f)
				}
				if s.invalid[fp1].GetNode() != "n1" || s.invalid[fp1].GetCheck() != "ping" {
					t.Fatalf("invalid set = %v", s.invalid)
				}
				if s.rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
					t.Fatalf("phase = %s", s.rollout.GetPhase())
				}
				if s.nodes["n1"].desired.GetFingerprint() != emptyFP || !s.nodes["n1"].desired.GetRevert() {
					t.Fatalf("n1 had no earlier config, so its revert is the empty config; got %v", s.nodes["n1"].desired)
				}
			},
		},
		{
			// NodeReverted (the agent's report, stored) goes out before the terminal
			// write, so a leader stopped right after that write has announced it.
			name: "the revert ends RolledBack once every touched node reports its backup",
			given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3"),
				Status{S: status("n1", invalid, fp1, id1)}, Status{S: status("n1", provisioned, emptyFP, id1)}},
			event: Status{S: status("n2", provisioned, emptyFP, id1)},
			want:  []string{"emit NodeReverted", "finish RolledBack", "emit RolloutRolledBack"},
			check: func(t *testing.T, s *State) {
				if s.lastApplied != nil {
					t.Fatalf("a rolled-back rollout must not become last-applied: %v", s.lastApplied)
				}
			},
		},
		{
			name:  "reverts respect maxParallel",
			given: []Event{loaded(head(1, r1.Id, "3"), r1, "n1", "n2", "n3", "n4")},
			event: Status{S: status("n1", invalid, fp1, id1)},
			want:  []string{"record n1", "write n1", "emit NodeRevertTarget", "write n2", "emit NodeRevertTarget", "write n3", "emit NodeRevertTarget", "emit NodeFailed", "emit FingerprintInvalid", "emit RolloutReverting"},
		},
		{
			name: "a revert never goes back to a known-bad fingerprint",
			given: []Event{
				Loaded{Head: head(1, r1.Id, "1"), HeadRev: r1, Presence: presence("n1", "n2"),
					Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: "bad-old"}},
					Invalid: []*sluicev1.InvalidFingerprint{{Fingerprint: "bad-old", Node: "n9", Check: "ping"}}},
			},
			event: Status{S: status("n1", invalid, fp1, id1)},
			want:  []string{"record n1", "finish RolledBack", "emit NodeFailed", "emit FingerprintInvalid", "emit NodeRevertFailed", "emit RolloutReverting", "emit RolloutRolledBack"},
		},
	})
}

// TestDecide_Guards: what is refused before any node is touched.
func TestDecide_Guards(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name:  "a known-bad fingerprint stops the rollout before any node is touched",
			event: Loaded{Head: head(1, r1.Id, "5"), HeadRev: r1, Presence: presence("n1", "n2"), Invalid: []*sluicev1.InvalidFingerprint{{Fingerprint: fp1, Node: "n7", Check: "ping", Output: "timeout", Rollout: "0-x"}}},
			want:  []string{"start " + id1, "finish Aborted", "emit RolloutStarted", "emit RolloutAborted"},
			check: func(t *testing.T, s *State) {
				if s.nodes["n1"].desired != nil {
					t.Fatal("a node was touched")
				}
			},
		},
		{
			name:  "retryInvalid forgives the recorded fingerprint and rolls out on purpose",
			event: Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "5", RetryInvalid: true}}, HeadRev: r1, Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{{Fingerprint: fp1, Node: "n7"}}},
			want:  []string{"start " + id1, "forgive n7", "write n1", "emit RolloutStarted", "emit FingerprintForgiven"},
		},
		{
			name:  "the head already rolled out starts nothing",
			event: Loaded{Head: head(1, r1.Id, ""), HeadRev: r1, Presence: presence("n1"), LastApplied: &sluicev1.RolloutRef{Revision: r1.Id, Generation: 1, Rollout: id1}, LastAppliedRev: r1, Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1}}},
			want:  nil, wantCounts: "no rollout",
		},
	})
}

// TestDecide_Queue: a new head while a rollout runs (whileActive).
func TestDecide_Queue(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name:       "a new head waits for the active rollout to end (whileActive queue, the default)",
			given:      []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event:      HeadMoved{Head: head(2, r2.Id, "1"), Rev: r2},
			want:       []string{"emit RolloutQueued"},
			wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
		{
			name:  "a queued head starts when the active rollout ends",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2"), HeadMoved{Head: head(2, r2.Id, "1"), Rev: r2}, Status{S: status("n1", provisioned, fp1, id1)}},
			event: Status{S: status("n2", provisioned, fp1, id1)},
			want:  []string{"finish Succeeded", "start " + id2, "write n1", "emit RolloutSucceeded", "emit RolloutStarted"},
		},
		{
			name:       "a superseding head stops the active rollout from starting nodes",
			given:      []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event:      HeadMoved{Head: withStrategy(head(2, r2.Id, "1"), &sluicev1.Strategy{WhileActive: "supersede"}), Rev: r2},
			want:       []string{"emit RolloutSuperseding"},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
		{
			name: "a superseded rollout ends Aborted once its in-flight nodes settled, keeping their outcomes; the new head starts",
			given: []Event{loaded(withStrategy(head(1, r1.Id, "1"), &sluicev1.Strategy{MaxParallel: "1", FailureBudget: "1"}), r1, "n1", "n2"),
				HeadMoved{Head: withStrategy(head(2, r2.Id, "1"), &sluicev1.Strategy{WhileActive: "supersede"}), Rev: r2}},
			event: Status{S: status("n1", invalid, fp1, id1)},
			want: []string{"record n1", "finish Aborted", "start " + id2, "write n1",
				"emit NodeFailed", "emit FingerprintInvalid", "emit RolloutAborted", "emit RolloutStarted"},
			check: func(t *testing.T, s *State) {
				if s.nodes["n1"].target != fp2 {
					t.Fatalf("n1 target = %s, want the new revision's", s.nodes["n1"].target)
				}
			},
			wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
	})
}

// TestDecide_Presence: nodes that leave, come back, join or beat.
func TestDecide_Presence(t *testing.T) {
	runDecide(t, []decideCase{
		{
			// Its desired key is read first (rereads.go); it is there.
			name: "a node the rollout touched that comes back while it reverts is reverted to its backup",
			given: []Event{loaded(head(1, r1.Id, "3"), r1, "n1", "n2", "n3", "n4"), Presence{Node: "n2"},
				Status{S: status("n1", invalid, fp1, id1)}, Presence{Node: "n2", P: presence("n2")[0]}},
			event: DesiredRead{Node: "n2", P: presence("n2")[0]},
			want:  []string{"emit NodeJoinedRevert"},
			check: func(t *testing.T, s *State) {
				if n := s.nodes["n2"]; n.rev != revQueued && n.rev != revInFlight {
					t.Fatalf("n2's revert state = %d; want it queued or written", n.rev)
				}
			},
		},
		{
			name:       "a pending node that leaves is skipped, not failed",
			given:      []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event:      Presence{Node: "n2"},
			want:       []string{"emit NodeSkipped"},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
		},
		{
			name:  "an in-flight node that leaves frees its slot",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event: Presence{Node: "n1"},
			want:  []string{"write n2", "emit NodeSkipped"}, wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
		},
		{
			name:  "the rollout succeeds when the only unfinished node leaves",
			given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2"), Status{S: status("n1", provisioned, fp1, id1)}},
			event: Presence{Node: "n2"},
			want:  []string{"finish Succeeded", "emit NodeSkipped", "emit RolloutSucceeded"},
		},
		{
			name:  "a skipped node that comes back is in the rollout again and no longer listed skipped",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2"), Presence{Node: "n2"}},
			event: Presence{Node: "n2", P: presence("n2")[0]},
			want:  []string{"emit NodeJoinedRollout"}, wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
			check: func(t *testing.T, s *State) {
				if sk := s.rollout.GetSkipped(); len(sk) != 0 {
					t.Fatalf("record still lists skipped %v", sk)
				}
			},
		},
		{
			name:  "a node joining mid-rollout gets the target",
			given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1")},
			event: Presence{Node: "n0", P: presence("n0")[0]},
			want:  []string{"write n0", "emit NodeJoinedRollout"}, wantCounts: "total=2 pending=0 inprogress=2 provisioned=0 failed=0 skipped=0",
		},
		{
			name:  "a heartbeat of a known node changes nothing",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1", "n2")},
			event: Presence{Node: "n2", P: presence("n2")[0]},
			want:  nil, wantCounts: "total=2 pending=1 inprogress=1 provisioned=0 failed=0 skipped=0",
		},
		{
			name: "a node joining outside a rollout gets the last applied config",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1"),
				Status{S: status("n1", provisioned, fp1, id1)}},
			event: Presence{Node: "n2", P: presence("n2")[0]},
			want:  []string{"write n2", "emit NodeConfigured"}, wantCounts: "no rollout",
		},
		{
			name: "a reaped node that comes back is configured afresh",
			given: []Event{loaded(head(1, r1.Id, "1"), r1, "n1"),
				Status{S: status("n1", provisioned, fp1, id1)}, Presence{Node: "n1"}, Reaped{Node: "n1"}},
			event: Presence{Node: "n1", P: presence("n1")[0]},
			want:  []string{"write n1", "emit NodeConfigured"}, wantCounts: "no rollout",
		},
	})
}

// TestDecide_Restart: a new term resuming from what is stored.
func TestDecide_Restart(t *testing.T) {
	runDecide(t, []decideCase{
		{
			name: "after a restart an active rollout resumes where its nodes are",
			event: Loaded{
				Head: head(1, r1.Id, "2"), HeadRev: r1,
				Active:    &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: &sluicev1.Strategy{MaxParallel: "2"}},
				ActiveRev: r1, Presence: presence("n1", "n2", "n3", "n4"),
				Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1}, {Node: "n2", Fingerprint: fp1, Rollout: id1}},
				Status:  []*sluicev1.NodeStatus{status("n1", provisioned, fp1, id1)},
			},
			want:       []string{"write n3", "emit RolloutResumed"},
			wantCounts: "total=4 pending=1 inprogress=2 provisioned=1 failed=0 skipped=0",
		},
		{
			name: "after a restart a recorded end whose active pointer stayed is finished",
			event: Loaded{
				Head: head(1, r1.Id, "2"), HeadRev: r1,
				Active:    &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED},
				ActiveRev: r1, Presence: presence("n1"),
				Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1}},
			},
			want: []string{"finish (record kept)"}, wantCounts: "no rollout",
			check: func(t *testing.T, s *State) {
				if s.lastApplied.GetGeneration() != 1 {
					t.Fatalf("lastApplied = %v, want generation 1", s.lastApplied)
				}
			},
		},
	})
}

func TestDecide_IsDeterministicWhateverTheArrivalOrder(t *testing.T) {
	r1 := testRev("aaaa1111")
	names := []string{"n5", "n1", "n4", "n2", "n3"}
	var first []string
	for i := range 10 {
		ns := slices.Clone(names)
		// rotate the arrival order of presence records
		ns = append(ns[i%len(ns):], ns[:i%len(ns)]...)
		s := NewState()
		got := summarize(Decide(s, Loaded{Head: head(1, r1.Id, "3"), HeadRev: r1, Presence: presence(ns...)}, t0))
		if i == 0 {
			first = got
			continue
		}
		if !slices.Equal(got, first) {
			t.Fatalf("order %v gave %v, first gave %v", ns, got, first)
		}
	}
	if !slices.Contains(first, "write n1") || !slices.Contains(first, "write n3") || slices.Contains(first, "write n4") {
		t.Fatalf("want n1..n3 started first, got %v", first)
	}
}

func TestMaxParallel(t *testing.T) {
	tests := []struct {
		given   string
		total   int
		want    int
		wantErr bool
	}{
		{"", 10, 1, false}, {"5", 10, 5, false}, {"10%", 1000, 100, false}, {"10%", 5, 1, false},
		{"1%", 1, 1, false}, {"0", 10, 0, true}, {"-1", 10, 0, true}, {"abc", 10, 0, true}, {"0%", 10, 0, true}, {"101%", 10, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.given, func(t *testing.T) {
			got, err := maxParallel(&sluicev1.Strategy{MaxParallel: tc.given}, tc.total)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("maxParallel(%q, %d) = %d, %v; want %d, err=%v", tc.given, tc.total, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func rolloutID(h *sluicev1.Head) string {
	return contract.RolloutID(h.GetGeneration(), h.GetRevision())
}

// A failed check is named once in the reasons, although the agent's message
// starts with it (the operator experience issue: "failed check ping: ping failed").
func TestDecide_FailureReasonsNameTheCheckOnce(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, "1"))
	s := NewState()
	Decide(s, Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1, Presence: presence("n1", "n2"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	st := status("n1", invalid, fp1, id1)
	st.FailedCheck, st.Message = "ping", "ping failed: exit status 1; restored last-good (checks pass)"
	acts := Decide(s, Status{S: st}, t0.Add(time.Second))
	var reasons []string
	for _, a := range acts {
		if e, ok := a.(Emit); ok {
			reasons = append(reasons, e.Event.GetReason())
		}
	}
	if len(reasons) == 0 {
		t.Fatal("no events")
	}
	for _, r := range reasons {
		if strings.Count(r, "ping") > 1 {
			t.Errorf("reason names the check twice: %q", r)
		}
	}
	if !strings.Contains(strings.Join(reasons, "\n"), "node n1: ping failed: exit status 1") {
		t.Errorf("reasons %q; want the over-budget reason to say node n1: ping failed: exit status 1", reasons)
	}
}
