package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDashboard_Views_SayWhatHappened (issue 42 items 2, 4, 5 and 12): in
// Chromium, against a fleet of five nodes in racks named like
// docker-compose's (rack-a1, rack-a2 …) with a rollout in wave 1 that only
// two nodes need:
//   - plan against actual: wave 1 is done and baking (its stage is still
//     open, its record's results zero), wave 2 planned for the other node to
//     change, wave 3 not needed; the summary says 2 of 5 nodes to change,
//     one at a time;
//   - every rack's label and rollup fit its box: rack-a1 and rack-a2 read
//     as themselves;
//   - the node list names each node's revision as sluice get nodes does
//     (the revision in force for a node it did not change);
//   - the plane's pause is a one-line badge with a local time; the rollout
//     held by sluice rollout pause says so under its phase, and its history
//     row reads Progressing (paused);
//   - a lease whose epoch is published after it was written is one term;
//   - a node whose presence goes stays in its rack;
//   - once the rollout succeeded, its row (the head, in force) offers no
//     Undo to this; an older one does.
//
// With SLUICE_SCREENSHOTS set it writes dashboard-views.png there.
func TestDashboard_Views_SayWhatHappened(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	now := time.Now()
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	l2 := func(vlan uint32, zone string) *sluicev1.Intent {
		return &sluicev1.Intent{Name: fmt.Sprintf("vlan-%d", vlan), Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 10000 + vlan,
			NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": zone}}}}}
	}
	// rev-3 (in force) gives zone-a VLAN 100; rev-4 (rolling out) also
	// zone-b VLAN 200: only zone-b's two nodes change.
	rev3 := &sluicev1.Revision{Id: "3333333333330000", Intents: []*sluicev1.Intent{l2(100, "zone-a")}, CreatedAt: ts(-time.Hour)}
	rev4 := &sluicev1.Revision{Id: "4444444444440000", Intents: []*sluicev1.Intent{l2(100, "zone-a"), l2(200, "zone-b")}, CreatedAt: ts(-time.Minute)}
	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	for _, r := range []*sluicev1.Revision{rev3, rev4} {
		if _, err := revs.Create(ctx, r.GetId(), r); err != nil {
			t.Fatal(err)
		}
	}
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	racks := []string{"rack-a1", "rack-a2", "rack-b1", "rack-b2", "rack-c1"}
	for i, rack := range racks {
		name := fmt.Sprintf("node-%02d", i+1)
		labels := map[string]string{"zone": "zone-" + rack[5:6], "rack": rack}
		if _, err := presences.Create(ctx, name, &sluicev1.NodePresence{Node: name, Labels: labels, AgentVersion: "dev", StartedAt: ts(0), HeartbeatAt: ts(0)}); err != nil {
			t.Fatal(err)
		}
		// Every node last changed by rev-2; node-03 (zone-b) already on rev-4.
		st := &sluicev1.NodeStatus{Node: name, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "2222222222220000", Rollout: "2-222222222222", LastUpdate: ts(-time.Hour)}
		st.AppliedFingerprint = render.Fingerprint(render.NodeConfig(rev3, labels))
		if name == "node-03" {
			st.Revision, st.Rollout, st.AppliedFingerprint = rev4.GetId(), "4-444444444444", render.Fingerprint(render.NodeConfig(rev4, labels))
		}
		st.Fingerprint = st.AppliedFingerprint
		if _, err := statuses.Create(ctx, name, st); err != nil {
			t.Fatal(err)
		}
	}
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	strategy := &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, BakeTime: durationpb.New(time.Minute)}
	for _, r := range []*sluicev1.Rollout{
		{Id: "2-222222222222", Revision: "2222222222220000", Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, Strategy: strategy,
			StartedAt: ts(-3 * time.Hour), FinishedAt: ts(-3 * time.Hour), Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 5, Attempted: 5}},
		{Id: "3-333333333333", Revision: rev3.GetId(), Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, Strategy: strategy,
			StartedAt: ts(-2 * time.Hour), FinishedAt: ts(-2 * time.Hour), Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 5, Attempted: 2}},
		// As the coordinator records it while wave 1's node is done and
		// the bake runs: the open stage's results are zero until it ends.
		{Id: "4-444444444444", Revision: rev4.GetId(), Generation: 4, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: strategy,
			StartedAt: ts(-20 * time.Second), LeaderTime: durationpb.New(20 * time.Second), BakeUntil: ts(45 * time.Second), Wave: 1,
			Counts:   &sluicev1.RolloutCounts{Total: 5, Pending: 1, Provisioned: 4, Attempted: 1},
			Stages:   []*sluicev1.StageResult{{Wave: 1, StartedAt: ts(-20 * time.Second), CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 2, Provisioned: 3}}},
			Pause:    &sluicev1.PauseRequest{Paused: true, Generation: 1, By: "ana@ops-1", Reason: "checking wave 1", At: ts(-5 * time.Second)},
			PauseAck: &sluicev1.PauseAck{Generation: 1}},
	} {
		if _, err := rollouts.Create(ctx, r.GetId(), r); err != nil {
			t.Fatal(err)
		}
	}
	// The head, as the configurator wrote it before rollout 4 started.
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead,
		&sluicev1.Head{Revision: rev4.GetId(), Generation: 4, Strategy: strategy, UpdatedAt: ts(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if _, err := refs.Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "3-333333333333", Revision: rev3.GetId(), Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := refs.Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: "4-444444444444", Revision: rev4.GetId(), Generation: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} }).Create(ctx, contract.KeyPause,
		&sluicev1.PauseRequest{Paused: true, Generation: 3, By: "alice@ops-1 via the dashboard (credentials admin.creds)", Reason: "switch maintenance in row 4", At: ts(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// A new leader's lease: written without its epoch, which it publishes next.
	var epoch atomic.Uint64
	renew := func() error {
		b, err := store.Marshal(&sluicev1.LeaderLease{Holder: "dev", Session: "s1", AcquiredAt: ts(-time.Minute), RenewedAt: timestamppb.Now(), Epoch: epoch.Load()})
		if err == nil {
			_, err = env.Buckets.Leases.Put(ctx, contract.LeaseCoordinator, b)
		}
		return err
	}
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	// Renewed as its holder would: the bucket's TTL is the lease.
	rctx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	t.Cleanup(func() { stop(); <-renewed })
	go func() {
		defer close(renewed)
		tick := time.NewTicker(contract.DefaultSettings().LeaderLease / 4)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				_ = renew()
			}
		}
	}()

	url := serveDashboard(t, env, dashboard.Options{Who: "alice@ops-1 via the dashboard", Run: func(context.Context, []string) (string, error) { return "", nil }})
	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
	evalUntil(t, tab, 15*time.Second, "the page to show 5 nodes", `document.getElementById('fleet-count').textContent === '5 nodes'`)
	epoch.Store(1)
	if err := renew(); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, tab, 10*time.Second, "term 1 on the page", `document.getElementById('coordinator').textContent.includes('term1')`)

	// Plan against actual.
	evalUntil(t, tab, 10*time.Second, "the timeline", `document.querySelectorAll('#timeline > li').length === 3`)
	if got := evalString(t, tab, `[...document.querySelectorAll('#timeline > li')].map(li => li.dataset.wave + ':' + li.dataset.state).join(' ')`); got != "1:baking 2:planned 3:unneeded" {
		t.Errorf("timeline %q, want wave 1 baking, 2 planned, 3 not needed", got)
	}
	if got := evalString(t, tab, `document.querySelector('#timeline > li[data-wave="1"] .plan-words').textContent`); !strings.HasPrefix(got, "wave 1: 1 node planned, 1 started, 1 done") {
		t.Errorf("wave 1 reads %q, want its node started and done", got)
	}
	if got := evalString(t, tab, `document.getElementById('eta').textContent`); !strings.HasPrefix(got, "2 of 5 nodes to change, one at a time") || strings.Contains(got, "up to 1 nodes") {
		t.Errorf("the plan's summary %q, want 2 of 5 nodes to change, one at a time", got)
	}

	// Racks: each label and rollup fits its box.
	if got := evalString(t, tab, `(() => { const g = document.getElementById('map').getContext('2d'); g.font = '11px system-ui, sans-serif';
		const lines = (r) => r.drawn || [r.rollup];
		return layout.groups.filter(r => r.box).filter(r => !lines(r)[0].startsWith(r.label) || lines(r).some(l => g.measureText(l).width > r.box[2] - 2))
			.map(r => r.label + ' (' + r.box[2] + ' px): ' + lines(r).join(' / ')).join('; '); })()`); got != "" {
		t.Errorf("rack labels that do not fit their box: %s", got)
	}

	// Revisions as sluice get nodes shows them.
	_, out, _ := sluice(t, env.URL, "get", "nodes")
	cli := map[string]string{}
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 6 {
			cli[f[0]] = f[5]
		}
	}
	page := evalString(t, tab, `[...document.querySelectorAll('#node-rows tr[data-node]')].map(r => r.dataset.node + '=' + r.cells[3].textContent).join(' ')`)
	var want []string
	for i := range racks {
		name := fmt.Sprintf("node-%02d", i+1)
		want = append(want, name+"="+cli[name])
	}
	if page != strings.Join(want, " ") || cli["node-01"] != "333333333333" || cli["node-03"] != "444444444444" {
		t.Errorf("the node list's revisions %q, sluice get nodes' %q (want 333333333333 in force, node-03 444444444444)", page, strings.Join(want, " "))
	}

	// The pause: a badge on one line, in local time; the held rollout.
	ps := `document.getElementById('pause-state')`
	if got := evalString(t, tab, ps+`.textContent`); !strings.Contains(got, "paused (generation 3) by alice@ops-1") || regexp.MustCompile(`\d{4}-\d\d-\d\dT`).MatchString(got) {
		t.Errorf("the pause reads %q, want who paused without an ISO time", got)
	}
	if got := evalString(t, tab, `(() => { const p = `+ps+`, s = getComputedStyle(p); return s.whiteSpace + ' ' + (p.getBoundingClientRect().height < 2.2 * parseFloat(s.lineHeight || s.fontSize)) + ' ' + (s.backgroundColor !== 'rgba(0, 0, 0, 0)'); })()`); got != "nowrap true true" {
		t.Errorf("the pause badge: white-space, one line, a background: %q, want nowrap true true", got)
	}
	held := `(document.getElementById('rollout-held') || { hidden: true })`
	if got := evalString(t, tab, held+`.hidden ? '(hidden)' : `+held+`.textContent`); !strings.HasPrefix(got, "Held: no node operation in flight") || !strings.Contains(got, "paused by ana@ops-1") || !strings.Contains(got, "checking wave 1") {
		t.Errorf("the held rollout reads %q", got)
	}
	if got := evalString(t, tab, `document.querySelector('#history tr[data-rollout="4-444444444444"] td').textContent`); got != "Progressing (paused)" {
		t.Errorf("the held rollout's history row: %q, want Progressing (paused) as sluice get rollouts", got)
	}
	if got := evalString(t, tab, `document.getElementById('coordinator').textContent`); strings.Contains(got, "term before") {
		t.Errorf("coordinator %q: the epoch published is the same term, want no term before", got)
	}
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shoot(t, tab, filepath.Join(dir, "dashboard-views.png"))
	}

	// A node whose presence goes (sluice creds revoke deletes it) stays in its
	// rack, in its category (the server's placement), said to have left.
	if err := env.Buckets.Nodes.Delete(ctx, "node-02"); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, tab, 10*time.Second, "node-02 shown left", `document.querySelector('#node-rows tr[data-node="node-02"]').cells[1].textContent.endsWith('(left: not present)')`)
	if got := evalString(t, tab, `document.querySelector('#node-rows tr[data-node="node-02"]').cells[2].textContent + ' ' + cells.find(c => c.name === 'node-02').grp.label`); got != "zone-a/rack-a2 rack-a2" {
		t.Errorf("node-02 after it left: %q, want still zone-a/rack-a2 on the list and the map", got)
	}

	// The rollout succeeds: its revision is the head; its row offers no undo.
	if _, err := rollouts.Mutate(ctx, "4-444444444444", func(r *sluicev1.Rollout) (*sluicev1.Rollout, error) {
		r.Phase, r.FinishedAt, r.BakeUntil, r.Pause, r.PauseAck = sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, ts(0), nil, nil, nil
		r.Counts = &sluicev1.RolloutCounts{Total: 5, Provisioned: 5, Attempted: 2}
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := refs.Mutate(ctx, contract.KeyLastApplied, func(*sluicev1.RolloutRef) (*sluicev1.RolloutRef, error) {
		return &sluicev1.RolloutRef{Rollout: "4-444444444444", Revision: rev4.GetId(), Generation: 4}, nil
	}); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, tab, 10*time.Second, "4-444444444444 succeeded", `document.querySelector('#history tr[data-rollout="4-444444444444"]').dataset.phase === 'Succeeded'`)
	evalUntil(t, tab, 10*time.Second, "4-444444444444 in force", `document.querySelector('#history tr[data-rollout="4-444444444444"] th').textContent.includes('in force') ||
		!!document.querySelector('#history tr[data-rollout="4-444444444444"] button[data-action="undo"]')`)
	undo := func(id string) bool {
		return evalIn[bool](t, tab, `!!document.querySelector('#history tr[data-rollout="`+id+`"] button[data-action="undo"]')`)
	}
	if undo("4-444444444444") || !undo("3-333333333333") {
		t.Errorf("Undo to this on 4-444444444444 (the head, in force): %v, on 3-333333333333: %v; want only on 3", undo("4-444444444444"), undo("3-333333333333"))
	}
}
