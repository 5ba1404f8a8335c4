package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Operators' requests (the control bucket): abort a running rollout,
// forgive a fingerprint recorded invalid.
func TestDecide_OperatorRequests(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp0, fp1 := targetOf(r0), targetOf(r1)
	id0, id1 := rolloutID(head(1, r0.Id, "")), rolloutID(head(2, r1.Id, ""))
	onR0 := func(n string) *sluicev1.DesiredConfig {
		return &sluicev1.DesiredConfig{Node: n, Fingerprint: fp0, Rollout: id0, Revision: r0.Id, Config: render0(r0)}
	}
	// r1 rolls out one node at a time over n1..n3, all on r0 and proven.
	running := Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1,
		LastApplied: &sluicev1.RolloutRef{Rollout: id0, Revision: r0.Id, Generation: 1}, LastAppliedRev: r0,
		Presence: presence("n1", "n2", "n3"),
		Desired:  []*sluicev1.DesiredConfig{onR0("n1"), onR0("n2"), onR0("n3")},
		Status: []*sluicev1.NodeStatus{status("n1", provisioned, fp0, id0), status("n2", provisioned, fp0, id0),
			status("n3", provisioned, fp0, id0)}}
	abort := func(id string, noRevert bool) Event {
		return AbortRequested{R: &sluicev1.AbortRequest{Rollout: id, NoRevert: noRevert, Reason: "maintenance window over", By: "ops@laptop"}}
	}
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	known := &sluicev1.InvalidFingerprint{Fingerprint: fp1, Node: "n9", Rollout: "9-old", Check: "ping", Output: "100% loss", Time: at(-time.Hour)}

	tests := []struct {
		name  string
		given []Event
		event Event
		want  []string
		check func(t *testing.T, s *State, acts []Action)
	}{
		{
			name:  "abort reverts every touched node with the strategy's concurrency, and the rollout ends ABORTED",
			given: []Event{running, Status{S: status("n1", provisioned, fp1, id1)}},
			event: abort(id1, false),
			want:  []string{"write n1", "emit RolloutReverting"}, // n1 first, n2 (stopped in flight) next: maxParallel 1
		},
		{
			name:  "an aborted rollout ends ABORTED once its revert is done, naming who aborted it and why",
			given: []Event{running, Status{S: status("n1", provisioned, fp1, id1)}, abort(id1, false)},
			event: Status{S: status("n1", provisioned, fp0, id1)}, // n1's revert done: n2's is written
			want:  []string{"emit NodeReverted", "write n2"},
			check: func(t *testing.T, s *State, acts []Action) {
				acts = Decide(s, Status{S: status("n2", provisioned, fp0, id1)}, t0.Add(6*time.Second))
				fin, ok := findAction[FinishRollout](acts)
				if !ok || fin.Rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED ||
					!strings.Contains(fin.Rollout.GetReason(), "aborted by ops@laptop: maintenance window over") || fin.LastApplied != nil {
					t.Fatalf("finish = %v; want ABORTED naming the operator and reason, r1 not in force", fin.Rollout)
				}
				if c := fin.Rollout.GetCounts(); c.GetReverted() != 2 {
					t.Fatalf("counts %v; want n1 and n2 reverted", c)
				}
			},
		},
		{
			name:  "abort with no_revert stops starting nodes and leaves the touched ones as they are",
			given: []Event{running, Status{S: status("n1", provisioned, fp1, id1)}},
			event: abort(id1, true),
			want:  []string{"emit RolloutAborting"},
			check: func(t *testing.T, s *State, acts []Action) {
				acts = Decide(s, Status{S: status("n2", provisioned, fp1, id1)}, t0.Add(6*time.Second))
				fin, ok := findAction[FinishRollout](acts)
				if !ok || fin.Rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED || slices.ContainsFunc(acts, func(a Action) bool {
					w, ok := a.(WriteDesired)
					return ok && w.Desired.GetRevert()
				}) {
					t.Fatalf("actions %v; want ABORTED once n2 (in flight) settled, nothing reverted", summarize(acts))
				}
			},
		},
		{
			name:  "an abort for a rollout that is not running changes nothing",
			given: []Event{running},
			event: abort("7-somethingelse", false),
			want:  nil,
		},
		{
			name: "an abort found at load is acted on by the new leader",
			event: func() Event {
				l := running
				l.Active = &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
					Strategy: &sluicev1.Strategy{MaxParallel: "1"}, Counts: &sluicev1.RolloutCounts{}}
				l.ActiveRev = r1
				l.Desired = []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1, Revision: r1.Id, Config: render0(r1)}, onR0("n2"), onR0("n3")}
				l.Backups = []*sluicev1.DesiredConfig{onR0("n1")}
				l.Aborts = []*sluicev1.AbortRequest{{Rollout: id1, By: "ops"}}
				return l
			}(),
			want: []string{"write n1", "emit RolloutResumed", "emit RolloutReverting"},
			check: func(t *testing.T, s *State, acts []Action) {
				w, _ := findAction[WriteDesired](acts)
				if !w.Desired.GetRevert() || w.Desired.GetFingerprint() != fp0 {
					t.Fatalf("write %v; want n1 reverted to %s", w.Desired, fp0)
				}
			},
		},
		{
			name:  "forgive takes a fingerprint recorded before the request out of the invalid set, keeping the record",
			given: []Event{Loaded{Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{known}}},
			event: ForgiveRequested{R: &sluicev1.ForgiveRequest{Fingerprint: fp1, Reason: "fixed the switch", By: "ops", At: at(0)}},
			want:  []string{"forgive n9", "emit FingerprintForgiven"},
			check: func(t *testing.T, s *State, acts []Action) {
				f, _ := findAction[ForgiveInvalid](acts)
				if fg := f.Fingerprint.GetForgiven(); fg.GetBy() != "ops" || fg.GetReason() != "fixed the switch" || f.Fingerprint.GetCheck() != "ping" {
					t.Fatalf("record = %v; want it kept with who forgave it and why", f.Fingerprint)
				}
				if s.invalid[fp1] != nil {
					t.Fatal("still in the invalid set")
				}
			},
		},
		{
			name:  "a forgive request for an earlier record of the fingerprint (it failed again since) changes nothing",
			given: []Event{Loaded{Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{known}}},
			event: ForgiveRequested{R: &sluicev1.ForgiveRequest{Fingerprint: fp1, By: "ops", At: at(0), RecordedAt: at(-3 * time.Hour)}},
			want:  nil,
		},
		{
			name:  "a forgive request naming the record it saw forgives it",
			given: []Event{Loaded{Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{known}}},
			event: ForgiveRequested{R: &sluicev1.ForgiveRequest{Fingerprint: fp1, By: "ops", At: at(-2 * time.Hour), RecordedAt: known.GetTime()}},
			want:  []string{"forgive n9", "emit FingerprintForgiven"},
		},
		{
			name:  "a forgive request older than the record (it failed again since) changes nothing",
			given: []Event{Loaded{Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{known}}},
			event: ForgiveRequested{R: &sluicev1.ForgiveRequest{Fingerprint: fp1, By: "ops", At: at(-2 * time.Hour)}},
			want:  nil,
		},
		{
			name: "a forgiven record is not in the invalid set after a restart, and the head's rollout is not refused",
			event: Loaded{Head: head(2, r1.Id, "1"), HeadRev: r1, Presence: presence("n1"),
				Invalid: []*sluicev1.InvalidFingerprint{{Fingerprint: fp1, Node: "n9", Time: at(-time.Hour),
					Forgiven: &sluicev1.Forgiveness{By: "ops", At: at(-time.Minute)}}}},
			want: []string{"start " + id1, "write n1", "emit RolloutStarted"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			for _, ev := range tc.given {
				Decide(s, ev, t0)
			}
			acts := Decide(s, tc.event, t0.Add(5*time.Second))
			if tc.want != nil || tc.check == nil {
				if got := summarize(acts); !slices.Equal(got, tc.want) {
					t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
				}
			}
			if tc.check != nil {
				tc.check(t, s, acts)
			}
		})
	}
}

// With an expiry set, a fingerprint recorded invalid longer ago is
// forgiven on behalf of the expiry; without one nothing expires.
func TestDecide_InvalidExpiry(t *testing.T) {
	old := &sluicev1.InvalidFingerprint{Fingerprint: "fp-old", Node: "n9", Check: "ping", Output: "loss", Time: timestamppb.New(t0.Add(-25 * time.Hour))}
	recent := &sluicev1.InvalidFingerprint{Fingerprint: "fp-new", Node: "n9", Check: "ping", Output: "loss", Time: timestamppb.New(t0.Add(-time.Hour))}
	for _, tc := range []struct {
		expiry time.Duration
		want   []string
	}{{24 * time.Hour, []string{"forgive n9", "emit FingerprintForgiven"}}, {0, nil}} {
		s := NewState()
		Decide(s, Loaded{Presence: presence("n1"), Invalid: []*sluicev1.InvalidFingerprint{old, recent}, InvalidExpiry: tc.expiry}, t0)
		acts := Decide(s, Tick{}, t0.Add(time.Second))
		if got := summarize(acts); !slices.Equal(got, tc.want) {
			t.Fatalf("expiry %s: actions %v; want %v", tc.expiry, got, tc.want)
		}
		if f, ok := findAction[ForgiveInvalid](acts); ok && (f.Fingerprint.GetFingerprint() != "fp-old" || f.Fingerprint.GetForgiven().GetBy() != "expiry") {
			t.Fatalf("forgiven %v; want fp-old, by the expiry", f.Fingerprint)
		}
	}
}
