package cli

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A rolled-back rollout names the nodes it stopped in flight once their
// revert is done (sluice issue 42 item 3: "stopped in flight 1" named no
// node once node-04 was back on its backup): rollout status, describe
// rollout and rollout history name them from the record.
func TestRolloutStatus_StoppedInFlight_NamedOnceReverted(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	started := timestamppb.New(time.Now().Add(-time.Hour))
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK,
		Reason: "node-01 failed check ping", Strategy: &sluicev1.Strategy{MaxParallel: "2"}, StartedAt: started, FinishedAt: timestamppb.Now(),
		Counts:       &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Stopped: 1, Attempted: 5, Reverted: 5},
		Failures:     []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "ping", Message: "unreachable"}},
		StoppedNodes: []string{"node-04"},
	}
	seed{
		rollouts: []*sluicev1.Rollout{r},
		desired:  []*sluicev1.DesiredConfig{{Node: "node-04", Rollout: r.GetId(), Fingerprint: fpBackup, Revert: true}},
		statuses: []*sluicev1.NodeStatus{{Node: "node-04", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpBackup, Rollout: r.GetId()}},
	}.write(t, env)

	for _, args := range [][]string{{"rollout", "status"}, {"describe", "rollout"}} {
		code, stdout, stderr := sluice(t, env.URL, args...)
		if code != ExitRolledBack {
			t.Fatalf("%s: exit code %d, want %d; stderr %s, stdout:\n%s", args, code, ExitRolledBack, stderr, stdout)
		}
		words := strings.Join(strings.Fields(stdout), " ")
		if want := "node-04 stopped in flight, reverted - no outcome of its own"; !strings.Contains(words, want) {
			t.Errorf("%s: missing %q:\n%s", args, want, stdout)
		}
	}
	code, stdout, stderr := sluice(t, env.URL, "rollout", "history")
	if code != 0 {
		t.Fatalf("rollout history: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "stopped in flight: node-04\n") {
		t.Errorf("rollout history does not name node-04 stopped in flight:\n%s", stdout)
	}
}

// The record names the first of its stopped nodes (bounded); the rest are
// counted and said to be unnamed.
func TestNodeTable_StoppedInFlight_MoreThanNamed(t *testing.T) {
	r := &sluicev1.Rollout{Id: "5-bbbbbbbbbbbb", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK,
		Counts: &sluicev1.RolloutCounts{Total: 150, Stopped: 150}, StoppedNodes: []string{"node-001", "node-002"}}
	text := strings.Join(nodeLines(r, nil, time.Now()), "\n")
	for _, want := range []string{"node-001   stopped in flight", "node-002   stopped in flight",
		"… and 148 more stopped in flight, not named (the record names the first 2 by name)"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q:\n%s", want, text)
		}
	}
}
