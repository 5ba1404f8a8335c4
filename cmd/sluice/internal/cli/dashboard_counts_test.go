package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDashboard_MapAgreesWithTheCounts (sluice issue 42, items 1 and 3):
// five nodes, of which the revision changes only zone-a's two. While the
// rollout runs, the three it does not change are provisioned on the map as
// in the counts (they were drawn "Pending / no status"); when it stops,
// the node in flight is counted and named stopped in flight, and still
// named once it is reverted (from the record: the map draws it reverted),
// and the counts add up to the total (they said "counts add up to 4, not
// the total 5");
// the reverted nodes are drawn reverted (they were drawn provisioned). At
// each step the map's cells, by category, are the panel's counts. The
// History row names the node stopped in flight too (it said only
// "stopped in flight 1").
func TestDashboard_MapAgreesWithTheCounts(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	ts := timestamppb.Now()
	l2 := func(name string, vlan uint32, sel map[string]string) *sluicev1.Intent {
		l := &sluicev1.Layer2Network{Vlan: vlan, Vni: 10000 + vlan}
		if sel != nil {
			l.NodeSelector = &sluicev1.NodeSelector{MatchLabels: sel}
		}
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: l}}
	}
	rev := func(intents ...*sluicev1.Intent) *sluicev1.Revision {
		return &sluicev1.Revision{Id: render.RevisionID(intents), Intents: render.Sorted(intents)}
	}
	r0 := rev(l2("mgmt", 100, nil))
	r1 := rev(l2("mgmt", 100, nil), l2("zone-a-only", 140, map[string]string{"zone": "zone-a"}))
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Create(ctx, r1.GetId(), r1); err != nil {
		t.Fatal(err)
	}
	zone := map[string]string{"node-01": "zone-a", "node-02": "zone-b", "node-03": "zone-c", "node-04": "zone-b", "node-05": "zone-a"}
	fp := func(r *sluicev1.Revision, node string) string {
		return render.Fingerprint(render.NodeConfig(r, map[string]string{"zone": zone[node], "rack": "rack-1"}))
	}
	if fp(r0, "node-02") != fp(r1, "node-02") || fp(r0, "node-01") == fp(r1, "node-01") {
		t.Fatal("the revision must change zone-a's nodes only")
	}
	const prev = "1-aaaaaaaaaaaa"
	id := contract.RolloutID(2, r1.GetId())
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	put := func(st *sluicev1.NodeStatus) {
		t.Helper()
		st.LastUpdate = ts
		if _, err := statuses.Mutate(ctx, st.GetNode(), func(*sluicev1.NodeStatus) (*sluicev1.NodeStatus, error) { return st, nil }); err != nil {
			t.Fatal(err)
		}
	}
	on := func(node string, r *sluicev1.Revision, rollout string, phase sluicev1.NodePhase) *sluicev1.NodeStatus {
		return &sluicev1.NodeStatus{Node: node, Phase: phase, Fingerprint: fp(r, node), Revision: r.GetId(), Rollout: rollout}
	}
	record := func(r *sluicev1.Rollout) {
		t.Helper()
		if _, err := rollouts.Mutate(ctx, r.GetId(), func(*sluicev1.Rollout) (*sluicev1.Rollout, error) { return r, nil }); err != nil {
			t.Fatal(err)
		}
	}
	provisioned, provisioning := sluicev1.NodePhase_NODE_PHASE_PROVISIONED, sluicev1.NodePhase_NODE_PHASE_PROVISIONING
	for node, z := range zone {
		if _, err := presences.Create(ctx, node, &sluicev1.NodePresence{Node: node, Labels: map[string]string{"zone": z, "rack": "rack-1"}, StartedAt: ts, HeartbeatAt: ts}); err != nil {
			t.Fatal(err)
		}
		put(on(node, r0, prev, provisioned))
	}
	// Wave 1 (node-01) is provisioned, node-05 waits for wave 2; the others
	// run the revision's config already.
	put(on("node-01", r1, id, provisioned))
	r := &sluicev1.Rollout{Id: id, Revision: r1.GetId(), PreviousRevision: r0.GetId(), Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		StartedAt: ts, Strategy: &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1}, Wave: 1,
		Counts: &sluicev1.RolloutCounts{Total: 5, Pending: 1, Provisioned: 4, Attempted: 1}}
	record(r)
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive,
		&sluicev1.RolloutRef{Rollout: id, Revision: r1.GetId(), Generation: 2}); err != nil {
		t.Fatal(err)
	}

	url := serveDashboard(t, env, dashboard.Options{})
	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
	dir := os.Getenv(EnvScreenshots)
	// step waits for the list's categories and the counts, then checks that
	// the map's cells by category are the counts the panel shows.
	step := func(name, wantStates, wantCounts, wantSum string) {
		t.Helper()
		evalUntil(t, tab, 15*time.Second, name+": the node list's categories "+wantStates,
			`[...document.querySelectorAll('#node-rows tr[data-node]')].map(r => r.dataset.node + '=' + r.dataset.state).join(' ') === '`+wantStates+`'`)
		evalUntil(t, tab, 5*time.Second, name+": the counts "+wantCounts,
			`[...document.querySelectorAll('#counts li, #counts-revert li')].map(li => li.textContent).join(', ') === '`+wantCounts+`'`)
		if got := evalString(t, tab, `document.getElementById('counts-sum').textContent`); got != wantSum {
			t.Errorf("%s: the sum says %q, want %q", name, got, wantSum)
		}
		// Every cell's category against the panel's count of it: the same
		// while no revert runs; during and after one, a touched node is
		// drawn where its revert is (reverted, not also provisioned), so no
		// category has more cells than its count, and reverted as many.
		revert := evalIn[bool](t, tab, `!document.getElementById('counts-revert').hidden`)
		cells := evalString(t, tab, `(() => { const k = {}; for (const c of cells) k[c.st] = (k[c.st] || 0) + 1;
			return Object.keys(k).sort().map(s => s + ' ' + k[s]).join(', '); })()`)
		for _, part := range strings.Split(cells, ", ") {
			key, n, _ := strings.Cut(part, " ")
			shown := evalString(t, tab, `(() => { const li = document.querySelector('#counts li[data-count="`+key+`"], #counts-revert li[data-count="`+key+`"]');
				return li ? li.textContent : ''; })()`)
			count, err := strconv.Atoi(strings.TrimRight(strings.Fields(strings.TrimPrefix(shown, contract.Words(key)+" ") + " x")[0], ":"))
			cellsN, _ := strconv.Atoi(n)
			if err != nil || !revert && cellsN != count || cellsN > count || key == contract.CountReverted && cellsN != count {
				t.Errorf("%s: the map has %s %s cells, the panel says %q", name, n, key, shown)
			}
		}
		if dir != "" {
			shoot(t, tab, filepath.Join(dir, "counts-"+strings.ReplaceAll(name, " ", "-")+".png"))
		}
	}
	// history waits for the History panel's row of the rollout: its cells
	// provisioned/total, failed, other, reverted, as sluice rollout history
	// prints them (the row read provisioned and failed from the record, and
	// had no other: 3/5 and 1 left one node out).
	history := func(name, want string) {
		t.Helper()
		evalUntil(t, tab, 5*time.Second, name+": the History row "+want,
			`[...document.querySelectorAll('#history tr[data-rollout="`+id+`"] td[data-count]')].map(td => td.textContent).join(' | ') === '`+want+`'`)
		if dir != "" {
			shootElement(t, tab, "#history-table", filepath.Join(dir, "history-"+strings.ReplaceAll(name, " ", "-")+".png"))
		}
	}
	step("a rollout",
		"node-01=provisioned node-02=provisioned node-03=provisioned node-04=provisioned node-05=pending",
		"pending 1, in progress 0, provisioned 4, failed 0, skipped 0",
		"5 of 5 nodes accounted for")
	history("a rollout", "4/5 | 0 | pending 1 | 0")

	// node-05 started, node-01 failed: the rollout reverts; node-05 was in
	// flight, node-01's backup is written back.
	put(on("node-05", r1, id, provisioning))
	put(on("node-01", r0, id, provisioning))
	r.Phase, r.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, "node-01 failed check ping"
	r.Counts = &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Stopped: 1, Attempted: 2, Reverting: 2}
	r.Failures = []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "ping", Fingerprint: fp(r1, "node-01")}}
	r.StoppedNodes = []string{"node-05"} // as the coordinator names it, with the count
	record(r)
	step("a revert",
		"node-01=reverting node-02=provisioned node-03=provisioned node-04=provisioned node-05=stopped",
		"pending 0, in progress 0, provisioned 3, failed 1, skipped 0, stopped in flight 1: node-05, not started 0, reverting 2, reverted 0",
		"5 of 5 nodes accounted for; the revert counts the 2 touched again")
	if got := evalString(t, tab, `document.getElementById('operations').textContent`); got != "operations 2 attempted: 0 in progress, 0 completed, 1 failed, 0 cancelled at their deadline, 1 stopped in flight" {
		t.Errorf("operations: %q", got)
	}
	history("a revert", "3/5 | 1 | stopped in flight 1: node-05 | 0")

	put(on("node-05", r0, id, provisioned))
	put(on("node-01", r0, id, provisioned))
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK
	r.Counts.Reverting, r.Counts.Reverted = 0, 2
	record(r)
	step("a rollback",
		"node-01=reverted node-02=provisioned node-03=provisioned node-04=provisioned node-05=reverted",
		"pending 0, in progress 0, provisioned 3, failed 1, skipped 0, stopped in flight 1: node-05, not started 0, reverting 0, reverted 2",
		"5 of 5 nodes accounted for; the revert counts the 2 touched again")
	history("a rollback", "3/5 | 1 | stopped in flight 1: node-05 | 2")
}
