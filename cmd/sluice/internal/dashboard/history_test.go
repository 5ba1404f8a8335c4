package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestStream_HistoryRow_AddsUpToItsTotal (sluice issue 42): the History
// panel read provisioned and failed from the record, so an aborted
// rollout's row (2/7 provisioned, 1 failed) did not add up to its total.
// Each rollout's tally now carries, besides TallyOf's categories, the ones
// the panel has no column for (stopped in flight, not started), as
// `sluice rollout history` lists them under OTHER: with provisioned and
// failed they are the total.
func TestStream_HistoryRow_AddsUpToItsTotal(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	now := timestamppb.New(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	r := &sluicev1.Rollout{Id: "3-abort", Revision: "rev-3", Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, Reason: "aborted by ops",
		StartedAt: now, FinishedAt: now, Counts: &sluicev1.RolloutCounts{Total: 7, Provisioned: 2, Failed: 1, Stopped: 1, NotStarted: 3, Attempted: 4},
		Failures: []*sluicev1.NodeOutcome{{Node: "node-03", FailedCheck: "ping", Result: sluicev1.NodeResult_NODE_RESULT_INVALID}}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(context.Background(), r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	var u struct {
		Tallies []struct {
			Rollout string
			contract.Tally
			Other []contract.Category
		}
	}
	select {
	case m := <-ch:
		if err := json.Unmarshal(m.data, &u); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot within 10 s")
	}
	if len(u.Tallies) != 1 || u.Tallies[0].Rollout != r.GetId() {
		t.Fatalf("tallies %+v, want 3-abort's", u.Tallies)
	}
	got, want := u.Tallies[0], contract.TallyOf(r)
	var other []string
	for _, c := range got.Other {
		other = append(other, c.Key)
		if c.N != want.N(c.Key) || c.Words != contract.Words(c.Key) {
			t.Errorf("other: %s %d, want TallyOf's %s %d", c.Words, c.N, contract.Words(c.Key), want.N(c.Key))
		}
	}
	if len(other) != 2 || other[0] != contract.CountStopped || other[1] != contract.CountNotStarted {
		t.Errorf("other lists %v, want [%s %s]", other, contract.CountStopped, contract.CountNotStarted)
	}
	if n := got.N(contract.CountProvisioned) + got.N(contract.CountFailed) + contract.Sum(got.Other); n != got.Total || got.Total != 7 {
		t.Errorf("the row adds up to %d, its total is %d (want 7)", n, got.Total)
	}
}

// TestStream_StoppedInFlight_NamedOnceReverted (sluice issue 42 item 3):
// the rollout panel named the nodes stopped in flight from where the map
// placed them, and once reverted a node is placed reverted: "stopped in
// flight 1" named no node. The tally's stopped category carries the
// record's names.
func TestStream_StoppedInFlight_NamedOnceReverted(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	now := timestamppb.New(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	r := &sluicev1.Rollout{Id: "4-back", Revision: "rev-4", Generation: 4, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "node-01 failed",
		StartedAt: now, FinishedAt: now, Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Stopped: 1, Attempted: 2, Reverted: 2},
		Failures:     []*sluicev1.NodeOutcome{{Node: "node-01", FailedCheck: "ping", Result: sluicev1.NodeResult_NODE_RESULT_INVALID}},
		StoppedNodes: []string{"node-05"}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(context.Background(), r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	var u struct {
		Tallies []struct {
			contract.Tally
			Other []contract.Category
		}
	}
	select {
	case m := <-ch:
		if err := json.Unmarshal(m.data, &u); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot within 10 s")
	}
	if len(u.Tallies) != 1 {
		t.Fatalf("tallies %+v, want 4-back's", u.Tallies)
	}
	for _, c := range u.Tallies[0].Nodes {
		if c.Key == contract.CountStopped && (c.N != 1 || len(c.Names) != 1 || c.Names[0] != "node-05") {
			t.Errorf("stopped in flight %d named %q, want 1 named [node-05]", c.N, c.Names)
		}
	}
	// The History row's Other (the panel names them there too).
	var other []string
	for _, c := range u.Tallies[0].Other {
		other = append(other, fmt.Sprintf("%s %d %v", c.Key, c.N, c.Names))
	}
	if got := strings.Join(other, ", "); got != contract.CountStopped+" 1 [node-05]" {
		t.Errorf("the History row's other: %s, want %s 1 [node-05]", got, contract.CountStopped)
	}
}
