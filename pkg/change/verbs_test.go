package change_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/change"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestUndo_WritesBackWhatDiffersAndMarksTheRest(t *testing.T) {
	a, b, c := l2("a", 100, ""), l2("b", 101, ""), l2("c", 102, "")
	live := stored(&sluicev1.StoredIntent{Intent: a}, &sluicev1.StoredIntent{Intent: l2("b", 201, "")},
		&sluicev1.StoredIntent{Intent: c}, &sluicev1.StoredIntent{Intent: l2("m", 103, ""), MarkedForDeletion: true})
	// The earlier revision had a and b (b as it was) and d, unreadable now.
	plan := change.Undo(live, map[string]uint64{"layer2network.d": 9}, []*sluicev1.Intent{b, l2("d", 104, ""), a})

	if got, want := ids(plan.Writes), []string{"layer2network/b", "layer2network/d"}; !slices.Equal(got, want) {
		t.Errorf("written back %v, want %v (a is stored as it was)", got, want)
	}
	if want := []string{"layer2network.c"}; !slices.Equal(plan.Mark, want) || !slices.Equal(plan.Marked, []string{"layer2network/c"}) {
		t.Errorf("marked %v (%v), want %v: m is marked already", plan.Mark, plan.Marked, want)
	}
	if got, want := ids(plan.Set), []string{"layer2network/a", "layer2network/b", "layer2network/d"}; !slices.Equal(got, want) {
		t.Errorf("set %v, want %v: the revision's intents, nothing else", got, want)
	}
	priors := map[string]*sluicev1.PriorIntent{}
	for _, p := range plan.Prior {
		priors[p.GetKey()] = p
	}
	if p := priors["layer2network.d"]; p.GetValue() != nil || p.GetKvRevision() != 9 {
		t.Errorf("d's prior %v, want the unreadable value's revision 9", p)
	}
	if p := priors["layer2network.c"]; !proto.Equal(p.GetValue().GetIntent(), c) || p.GetKvRevision() != 3 {
		t.Errorf("c's prior %v, want it as stored, revision 3", p)
	}
}

func TestRetry(t *testing.T) {
	head := &sluicev1.Strategy{MaxParallel: "2"}
	ended := func(phase sluicev1.RolloutPhase) *sluicev1.Rollout {
		return &sluicev1.Rollout{Phase: phase, Reason: "node n1 failed"}
	}
	tests := []struct {
		name    string
		record  *sluicev1.Rollout
		exists  bool
		asked   *sluicev1.Strategy
		want    *sluicev1.Strategy
		reason  string
		refused string
	}{
		{name: "not started", refused: "has not started yet"},
		{name: "running", record: ended(sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING), exists: true, refused: "still running"},
		{name: "reverting", record: ended(sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING), exists: true, refused: "still running"},
		{name: "succeeded", record: ended(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED), exists: true, refused: "succeeded"},
		{name: "rolled back: the head's strategy, retrying invalid", record: ended(sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK), exists: true,
			want: &sluicev1.Strategy{MaxParallel: "2", RetryInvalid: true}, reason: "retry of rollout 2-ab, which ended ROLLED_BACK: node n1 failed"},
		{name: "partially failed, with a strategy asked for", record: ended(sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED), exists: true,
			asked: &sluicev1.Strategy{MaxParallel: "5"}, want: &sluicev1.Strategy{MaxParallel: "5", RetryInvalid: true},
			reason: "retry of rollout 2-ab, which ended PARTIALLY_FAILED: node n1 failed"},
		{name: "a record that cannot be read is taken for ended", exists: true,
			want: &sluicev1.Strategy{MaxParallel: "2", RetryInvalid: true}, reason: "retry of rollout 2-ab, which ended UNSPECIFIED: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := change.Retry("2-ab", tc.record, tc.exists, tc.asked, head)
			var refused *change.Refused
			switch {
			case tc.refused != "":
				if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v, want a refusal saying %q", err, tc.refused)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if !proto.Equal(plan.Strategy, tc.want) || plan.Reason != tc.reason {
				t.Errorf("plan = %v, %q; want %v, %q", plan.Strategy, plan.Reason, tc.want, tc.reason)
			}
			if head.GetRetryInvalid() || tc.asked.GetRetryInvalid() {
				t.Error("the strategies given were changed")
			}
		})
	}
}

func TestLanded_IsTheStoredIntentsTheJournalLeaves(t *testing.T) {
	a, b := l2("a", 100, ""), l2("b", 101, "")
	live := stored(&sluicev1.StoredIntent{Intent: a, Source: "api"}, &sluicev1.StoredIntent{Intent: b, Source: "api"},
		&sluicev1.StoredIntent{Intent: l2("m", 103, ""), MarkedForDeletion: true})
	unreadable := map[string]uint64{"layer2network.u": 7, "layer2network.v": 8}
	j := &sluicev1.ApplyJournal{Source: "gitops", Origins: map[string]string{"layer2network.m": "m.yaml"},
		Intents: []*sluicev1.Intent{l2("b", 201, ""), l2("m", 103, ""), l2("u", 104, "")},
		Mark:    []string{"layer2network.a", "layer2network.v", "layer2network.gone"}}
	after, bad := change.Landed(live, unreadable, j)

	if got, want := ids(change.Effective(after)), []string{"layer2network/b", "layer2network/m", "layer2network/u"}; !slices.Equal(got, want) {
		t.Errorf("effective %v, want %v", got, want)
	}
	if len(bad) != 0 {
		t.Errorf("unreadable after %v, want none: u is overwritten, v marked", bad)
	}
	if m := after["layer2network.m"].Value; m.GetSource() != "gitops" || m.GetOrigin() != "m.yaml" || m.GetMarkedForDeletion() {
		t.Errorf("m = %v, want it stored by gitops from m.yaml, no longer marked", m)
	}
	if a := after["layer2network.a"].Value; !a.GetMarkedForDeletion() || a.GetSource() != "api" {
		t.Errorf("a = %v, want it marked, its source kept", a)
	}
	if _, ok := after["layer2network.gone"]; ok {
		t.Error("a key gone already is not brought back by a mark")
	}
	if live["layer2network.a"].Value.GetMarkedForDeletion() || len(unreadable) != 2 {
		t.Error("the inputs were changed")
	}
}
