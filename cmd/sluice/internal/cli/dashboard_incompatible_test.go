package cli

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDashboard_IncompatibleNodes_ShownAsSuch (issue 38 item 2): a node the
// running rollout skipped because its agent cannot read the config, and a
// node whose agent reports it Incompatible, show as Incompatible in the
// browser, not as pending.
func TestDashboard_IncompatibleNodes_ShownAsSuch(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	ts := timestamppb.Now()
	r := &sluicev1.Rollout{Id: "2-4ff435e62c9d", Revision: "4ff435e62c9d0000", Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		StartedAt: ts, UpdatedAt: ts, Strategy: &sluicev1.Strategy{MaxParallel: "3", SkipIncompatible: true},
		Counts: &sluicev1.RolloutCounts{Total: 3, Provisioned: 1, Skipped: 2, Incompatible: 2},
		Skipped: []*sluicev1.NodeOutcome{
			{Node: "node-02", Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, Message: "its agent v0.4.0 does not read config feature(s) bakeChecks"},
			{Node: "node-03", Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, Phase: sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE},
		}}
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	for name, st := range map[string]*sluicev1.NodeStatus{
		"node-01": {Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: r.Revision, Rollout: r.Id},
		"node-02": {Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "3aa0c1d2e3f4a5b6", Rollout: "1-3aa0c1d2e3f4"},
		"node-03": {Phase: sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE, Revision: r.Revision, Rollout: r.Id, AgentVersion: "v0.9.0"},
	} {
		st.Node, st.LastUpdate = name, ts
		if _, err := presences.Create(ctx, name, &sluicev1.NodePresence{Node: name, StartedAt: ts, HeartbeatAt: ts}); err != nil {
			t.Fatal(err)
		}
		if _, err := statuses.Create(ctx, name, st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.Id, r); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive,
		&sluicev1.RolloutRef{Rollout: r.Id, Revision: r.Revision, Generation: r.Generation}); err != nil {
		t.Fatal(err)
	}
	url := serveDashboard(t, env, dashboard.Options{})
	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
	evalUntil(t, tab, 15*time.Second, "the page to show 3 nodes", `document.getElementById('fleet-count').textContent === '3 nodes'`)
	got := evalString(t, tab, `[...document.querySelectorAll('#node-rows tr[data-node]')].map(r => r.dataset.node + '=' + r.dataset.state).join(' ')`)
	if want := "node-01=provisioned node-02=incompatible node-03=incompatible"; got != want {
		t.Errorf("node states %q, want %q", got, want)
	}
}
