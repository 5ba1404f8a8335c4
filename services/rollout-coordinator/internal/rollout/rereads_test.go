package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// withReads is summarize with the re-reads the decider asks for.
func withReads(acts []Action) []string {
	var out []string
	for _, a := range acts {
		switch a := a.(type) {
		case ReadStatuses:
			out = append(out, "read statuses "+strings.Join(a.Nodes, ","))
		case ReadDesired:
			out = append(out, "read desired "+a.Node)
		default:
			out = append(out, summarize([]Action{a})...)
		}
	}
	return out
}

// TestDecide_Rereads: which node the decider has the loop read again, and
// why, and what it does with the answer: the statuses of the nodes a
// deadline would time out (the watch may have missed a report), the
// desired key of a node coming back and of one a listing lacks (the reaper
// may have deleted it unheard).
func TestDecide_Rereads(t *testing.T) {
	h := withStrategy(head(1, r1.Id, "1"), &sluicev1.Strategy{MaxParallel: "1", ApplyDeadline: durationpb.New(time.Minute),
		ProgressDeadline: durationpb.New(time.Hour)})
	acked := []step{{0, loaded(h, r1, "n1")}, {time.Second, Status{S: status("n1", inProgress, fp1, id1)}}}
	done := []step{{0, loaded(h, r1, "n1", "n2")},
		{time.Second, Status{S: status("n1", provisioned, fp1, id1)}},
		{2 * time.Second, Status{S: status("n2", provisioned, fp1, id1)}}}
	timedOut := []string{"write n1", "emit NodeOperationCancelled", "record n1", "write n1", "emit NodeRevertTarget",
		"emit NodeTimedOut", "emit FingerprintInvalid", "emit RolloutReverting"}
	back := &sluicev1.NodePresence{Node: "n1", Labels: map[string]string{"zone": "a"}, StartedAt: timestamppb.New(t0.Add(time.Hour))}
	tests := []struct {
		name      string
		steps     []step // the last one's actions are compared
		want      []string
		wantRead  *ReadDesired // the ReadDesired asked for, if one
		wantPhase sluicev1.RolloutPhase
	}{
		{
			name:  "a node past its deadline has its status read again before it times out",
			steps: append(slices.Clone(acked), step{2 * time.Minute, Tick{Recheck: true}}),
			want:  []string{"read statuses n1"}, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		},
		{
			name:      "a tick without re-reads times it out at once",
			steps:     append(slices.Clone(acked), step{2 * time.Minute, Tick{}}),
			want:      timedOut,
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING,
		},
		{
			name: "nothing newer read: the deadline takes its course",
			steps: append(slices.Clone(acked), step{2 * time.Minute, Tick{Recheck: true}},
				step{2 * time.Minute, Rechecked{}}),
			want:      timedOut,
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING,
		},
		{
			name: "the report the watch missed is read: the node is provisioned, not timed out",
			steps: append(slices.Clone(acked), step{2 * time.Minute, Tick{Recheck: true}},
				step{2 * time.Minute, Rechecked{Statuses: []*sluicev1.NodeStatus{status("n1", provisioned, fp1, id1)}}}),
			want:      []string{"finish Succeeded", "emit RolloutSucceeded"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name:  "no node past its deadline: nothing is read",
			steps: append(slices.Clone(acked), step{30 * time.Second, Tick{Recheck: true}}),
			want:  nil, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		},
		{
			name:  "past the progress deadline nothing is read: the rollout ends",
			steps: append(slices.Clone(acked), step{2 * time.Hour, Tick{Recheck: true}}),
			want:  []string{"finish Aborted", "emit RolloutAborted"}, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED,
		},
		{
			name: "a configured node coming back has its desired key read before its presence is taken",
			steps: append(slices.Clone(done), step{time.Minute, Presence{Node: "n1"}},
				step{2 * time.Minute, Presence{Node: "n1", P: back}}),
			wantRead:  &ReadDesired{Node: "n1", Why: whyReturning, P: back},
			want:      []string{"read desired n1"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name:      "a configured node whose agent restarted unseen has its desired key read too",
			steps:     append(slices.Clone(done), step{2 * time.Minute, Presence{Node: "n1", P: back}}),
			wantRead:  &ReadDesired{Node: "n1", Why: whyReturning, P: back},
			want:      []string{"read desired n1"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "a heartbeat of a configured node reads nothing",
			steps: append(slices.Clone(done), step{2 * time.Minute, Presence{Node: "n1",
				P: &sluicev1.NodePresence{Node: "n1", Labels: map[string]string{"zone": "a"}}}}),
			want: nil, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "its key is gone: the node is configured afresh",
			steps: append(slices.Clone(done), step{time.Minute, Presence{Node: "n1"}},
				step{2 * time.Minute, Presence{Node: "n1", P: back}},
				step{2 * time.Minute, DesiredRead{Node: "n1", P: back, Gone: true}}),
			want:      []string{"write n1", "emit NodeConfigured"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "its key is there: it is not written again",
			steps: append(slices.Clone(done), step{time.Minute, Presence{Node: "n1"}},
				step{2 * time.Minute, Presence{Node: "n1", P: back}},
				step{2 * time.Minute, DesiredRead{Node: "n1", P: back}}),
			want: nil, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "a listing that lacks a configured node's key has that key read",
			steps: append(slices.Clone(done), step{time.Minute,
				DesiredListed{Keys: map[string]bool{contract.DesiredKey("n1"): true}, Started: t0.Add(50 * time.Second)}}),
			wantRead:  &ReadDesired{Node: "n2", Why: whyUnlisted, Listed: t0.Add(50 * time.Second)},
			want:      []string{"read desired n2"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "a listing that has every key reads nothing",
			steps: append(slices.Clone(done), step{time.Minute,
				DesiredListed{Keys: map[string]bool{contract.DesiredKey("n1"): true, contract.DesiredKey("n2"): true}}}),
			want: nil, wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
		{
			name: "an unlisted key found gone: the node is configured afresh",
			steps: append(slices.Clone(done), step{time.Minute, DesiredListed{Keys: map[string]bool{}}},
				step{time.Minute, DesiredRead{Node: "n2", Gone: true}}),
			want:      []string{"write n2", "emit NodeConfigured"},
			wantPhase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			var acts []Action
			var phase sluicev1.RolloutPhase // as the last record written says
			for _, st := range tc.steps {
				acts = Decide(s, st.ev, t0.Add(st.at))
				for _, a := range acts {
					switch a := a.(type) {
					case StartRollout:
						phase = a.Rollout.GetPhase()
					case SaveRollout:
						phase = a.Rollout.GetPhase()
					case FinishRollout:
						phase = a.Rollout.GetPhase()
					}
				}
			}
			if got := withReads(acts); !slices.Equal(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if tc.wantRead != nil {
				r, ok := findAction[ReadDesired](acts)
				if !ok || r.Node != tc.wantRead.Node || r.Why != tc.wantRead.Why || r.P != tc.wantRead.P || !r.Listed.Equal(tc.wantRead.Listed) {
					t.Errorf("read %+v; want %+v", r, *tc.wantRead)
				}
			}
			if got := phase; got != tc.wantPhase {
				t.Errorf("rollout %s; want %s", got, tc.wantPhase)
			}
		})
	}
}
