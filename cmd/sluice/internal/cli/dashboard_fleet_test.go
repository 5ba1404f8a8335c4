package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
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

// EnvScreenshots names a directory: TestDashboard_1000Nodes writes its
// screenshots there (docs/dashboard.md shows them).
const EnvScreenshots = "SLUICE_SCREENSHOTS"

// seedRollingFleet writes n nodes in 3 zones of 4 racks mid-rollout, as
// the services would have: most provisioned, a wave in progress, a dozen
// failed (some timed out) on one fingerprint, a few that left.
func seedRollingFleet(t *testing.T, env *natstest.Env, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	ts := timestamppb.New(now)
	const badFP = "8c158f2eaa0a5d1e6b0f4a3c9e2d7b6a1f0e9d8c7b6a5f4e3d2c1b0a99887766"
	const prevRev = "3aa0c1d2e3f4a5b6"
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	r := &sluicev1.Rollout{Id: "7-4ff435e62c9d", Revision: "4ff435e62c9d0000", PreviousRevision: prevRev, Generation: 7,
		Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, StartedAt: timestamppb.New(now.Add(-3 * time.Minute)), UpdatedAt: ts, LeaderTime: durationpb.New(3 * time.Minute),
		Strategy: &sluicev1.Strategy{MaxParallel: "10%", FirstWave: 10, FailureDomain: "zone", FailureBudget: "2%", BakeTime: durationpb.New(30 * time.Second)},
		Wave:     5, Domain: "zone-b", Counts: &sluicev1.RolloutCounts{Total: uint32(n)}}
	for i := range n {
		name := fmt.Sprintf("node-%04d", i+1)
		st := &sluicev1.NodeStatus{Node: name, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "4ff435e62c9d0000", Rollout: r.Id, LastUpdate: ts, Message: "applied"}
		switch {
		case i < n*6/10:
			r.Counts.Provisioned++
		case i < n*7/10:
			st.Phase, st.Message = sluicev1.NodePhase_NODE_PHASE_PROVISIONING, "applying"
			r.Counts.InProgress++
		case i < n*7/10+12:
			r.Counts.Failed++
			out := &sluicev1.NodeOutcome{Node: name, Fingerprint: badFP, FailedCheck: "mgmt-reachable", Output: "ping 10.0.0.1 via mgmt: 100% packet loss",
				Result: sluicev1.NodeResult_NODE_RESULT_INVALID, Phase: sluicev1.NodePhase_NODE_PHASE_INVALID}
			st.Phase, st.FailedCheck, st.CheckOutput, st.Message = sluicev1.NodePhase_NODE_PHASE_INVALID, "mgmt-reachable", out.Output, "check mgmt-reachable failed; restored last-good"
			if i%3 == 0 {
				r.Counts.TimedOut++
				out.Result, out.FailedCheck, out.Output = sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, "", ""
				st.Phase, st.Message = sluicev1.NodePhase_NODE_PHASE_PROVISIONING, "applying"
			}
			r.Failures = append(r.Failures, out)
		default:
			st.Revision, st.Rollout = prevRev, "6-"+prevRev[:12]
			r.Counts.Pending++
		}
		if i%200 != 199 { // every 200th node left: its status stays, its presence expired
			p := &sluicev1.NodePresence{Node: name, Labels: map[string]string{"zone": "zone-" + string(rune('a'+i%3)), "rack": fmt.Sprintf("rack-%d", 1+(i/3)%4)},
				AgentVersion: "dev", StartedAt: ts, HeartbeatAt: ts}
			if _, err := presences.Create(ctx, name, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := statuses.Create(ctx, name, st); err != nil {
			t.Fatal(err)
		}
	}
	// Every node past the pending ones was written its config.
	r.Counts.Attempted = r.Counts.Provisioned + r.Counts.InProgress + r.Counts.Failed
	for w := uint32(1); w <= 5; w++ {
		began := now.Add(-3*time.Minute + time.Duration(w-1)*35*time.Second)
		st := &sluicev1.StageResult{Wave: w, Domain: "zone-" + string(rune('a'+(w-1)%3)), StartedAt: timestamppb.New(began), Nodes: 10 << (w - 1), Provisioned: 10 << (w - 1)}
		if w < 5 {
			st.EndedAt = timestamppb.New(began.Add(time.Duration(4+w) * time.Second))
		} else {
			st.Provisioned, st.Failed, st.TimedOut = st.Nodes-12, 12, 4
		}
		r.Stages = append(r.Stages, st)
	}
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if _, err := rollouts.Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	prev := &sluicev1.Rollout{Id: "6-" + prevRev[:12], Revision: prevRev, Generation: 6, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		StartedAt: timestamppb.New(now.Add(-time.Hour)), FinishedAt: timestamppb.New(now.Add(-50 * time.Minute)), Strategy: r.Strategy,
		Counts: &sluicev1.RolloutCounts{Total: uint32(n), Provisioned: uint32(n)}}
	if _, err := rollouts.Create(ctx, prev.GetId(), prev); err != nil {
		t.Fatal(err)
	}
	// The head, as the configurator wrote it before rollout 7 started.
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead,
		&sluicev1.Head{Revision: r.GetRevision(), Generation: 7, Strategy: r.GetStrategy(), UpdatedAt: timestamppb.New(now.Add(-4 * time.Minute)), Reason: "intents changed"}); err != nil {
		t.Fatal(err)
	}
	seedControlPlane(t, env, now, r.GetId())
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: r.Id, Revision: r.Revision, Generation: 7}); err != nil {
		t.Fatal(err)
	}
	fps := store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	if _, err := fps.Create(ctx, badFP, &sluicev1.InvalidFingerprint{Fingerprint: badFP, Revision: r.Revision, Rollout: r.Id, Node: r.Failures[0].GetNode(),
		Cause: "check-failed", Check: "mgmt-reachable", Output: "ping 10.0.0.1 via mgmt: 100% packet loss", Time: ts}); err != nil {
		t.Fatal(err)
	}
}

// seedControlPlane writes what the panels beside the rollout show: the
// coordinator's lease and instances, a freeze, a registry with pending
// deletions, and node-0701's configs and events.
func seedControlPlane(t *testing.T, env *natstest.Env, now time.Time, rollout string) {
	t.Helper()
	ctx := context.Background()
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	instances := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	for _, in := range []*sluicev1.Instance{
		{Component: contract.ComponentCoordinator, Instance: "coord-a", Host: "cp-1", Version: "dev", StartedAt: ts(-time.Hour), HeartbeatAt: ts(0), Role: "leader"},
		{Component: contract.ComponentCoordinator, Instance: "coord-b", Host: "cp-2", Version: "dev", StartedAt: ts(-time.Hour), HeartbeatAt: ts(0), Role: "standby"},
	} {
		if _, err := instances.Create(ctx, in.GetComponent()+"."+in.GetInstance(), in); err != nil {
			t.Fatal(err)
		}
	}
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	if _, err := leases.Create(ctx, contract.LeaseCoordinator,
		&sluicev1.LeaderLease{Holder: "coord-a", Session: "s1", Epoch: 7, AcquiredAt: ts(-10 * time.Minute), RenewedAt: ts(0)}); err != nil {
		t.Fatal(err)
	}
	// The lease lives one TTL after its last renewal, an instance record one
	// instance lease: renew them, as their holders would.
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
				_, _ = leases.Mutate(rctx, contract.LeaseCoordinator, func(l *sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
					l.RenewedAt = timestamppb.Now()
					return l, nil
				})
				for _, key := range []string{contract.ComponentCoordinator + ".coord-a", contract.ComponentCoordinator + ".coord-b"} {
					_, _ = instances.Mutate(rctx, key, func(in *sluicev1.Instance) (*sluicev1.Instance, error) {
						in.HeartbeatAt = timestamppb.Now()
						return in, nil
					})
				}
			}
		}
	}()
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }).Create(ctx, contract.FreezeKey("change-freeze"),
		&sluicev1.Freeze{Id: "change-freeze", From: ts(time.Hour), To: ts(3 * time.Hour), Reason: "datacenter maintenance", By: "ops@cp-1", CreatedAt: ts(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }).Create(ctx, "gitops",
		&sluicev1.RegistryStatus{Name: "gitops", Kind: "directory", Location: "/srv/gitops/network", State: sluicev1.RegistryState_REGISTRY_STATE_SYNCED,
			LastSync: ts(-5 * time.Second), Intents: 42, Marked: 1, UpdatedAt: ts(0), Pending: []*sluicev1.PendingDeletion{
				{Intent: "layer2network/vlan-300", MissingSince: ts(-time.Minute), EffectiveAt: ts(4 * time.Minute)},
				{Intent: "vrfroute/leak-dmz", MissingSince: ts(-time.Minute), EffectiveAt: ts(4 * time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	l2 := func(name string, vlan uint32) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 10000 + vlan, Mtu: 9000}}}
	}
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	for key, c := range map[string]*sluicev1.DesiredConfig{
		contract.BackupKey("node-0701"): {Node: "node-0701", Revision: "3aa0c1d2e3f4a5b6", Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("mgmt", 100), l2("storage", 200)}}},
		contract.DesiredKey("node-0701"): {Node: "node-0701", Revision: "4ff435e62c9d0000", Rollout: rollout, Operation: rollout + "/node-0701/apply",
			Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("mgmt", 110), l2("storage", 200), l2("tenant-a", 300)}}},
	} {
		c.Fingerprint = render.Fingerprint(c.GetConfig())
		if _, err := configs.Create(ctx, key, c); err != nil {
			t.Fatal(err)
		}
	}
	for i, ev := range []*sluicev1.Event{
		{Component: contract.ComponentCoordinator, Type: "NodeConfigured", Rollout: rollout, Reason: "desired config written (wave 5, zone-b)"},
		{Component: contract.ComponentAgent, Type: "NodeInvalid", Rollout: rollout, Reason: "check mgmt-reachable failed: ping 10.0.0.1 via mgmt: 100% packet loss; restored last-good"},
		{Component: contract.ComponentCoordinator, Type: "NodeFailed", Rollout: rollout, Reason: "node reported Invalid; 8c158f2eaa0a recorded invalid"},
	} {
		ev.Kind, ev.Id, ev.Node, ev.Time = contract.KindNode, "node-0701", "node-0701", ts(time.Duration(i-3)*time.Second)
		b, _ := store.Marshal(ev)
		if _, err := env.JS.Publish(ctx, contract.EventSubjectOf(contract.RoleOfComponent(ev.GetComponent()), contract.KindNode, "node-0701"), b); err != nil {
			t.Fatal(err)
		}
	}
	ev := &sluicev1.Event{Time: ts(0), Component: contract.ComponentAgent, Kind: contract.KindNode, Id: "node-0702", Node: "node-0702", Type: "NodeInvalid", Rollout: rollout, Reason: "check mgmt-reachable failed"}
	b, _ := store.Marshal(ev)
	if _, err := env.JS.Publish(ctx, contract.EventSubject(contract.KindNode, "node-0702"), b); err != nil {
		t.Fatal(err)
	}
}

// TestDashboard_1000Nodes: a fleet of 1,000 nodes mid-rollout is on the
// page: the map draws a cell for each, every name is in the paged list
// (search finds the last one), hovering a cell names its node and clicking
// it opens its drawer, the counts add up to the total and the failures are
// grouped under their one fingerprint. With SLUICE_SCREENSHOTS set it
// writes screenshots of the page there.
func TestDashboard_1000Nodes(t *testing.T) {
	const n = 1000
	env := natstest.Start(t, contract.DefaultSettings())
	seedRollingFleet(t, env, n)
	var ran [][]string
	var ranMu sync.Mutex
	url := serveDashboard(t, env, dashboard.Options{Who: "alice@ops-1 via the dashboard", Run: func(_ context.Context, args []string) (string, error) {
		ranMu.Lock()
		defer ranMu.Unlock()
		ran = append(ran, args)
		return "back from revision 4ff435e62c9d: revision 3aa0c1d2e3f4 is the head (generation 8)", nil
	}})

	tab := browser(t)
	began := time.Now()
	inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
	evalUntil(t, tab, 15*time.Second, "the page to show 1000 nodes", `document.getElementById('fleet-count').textContent === '1000 nodes'`)
	t.Logf("1000 nodes on the page %s after navigating", time.Since(began).Round(time.Millisecond))
	if got := evalString(t, tab, `document.getElementById('page').textContent`); got != "page 1 of 20 (1000 nodes)" {
		t.Errorf("pager says %q", got)
	}
	if got := evalIn[int](t, tab, `cells.length`); got != n {
		t.Errorf("the map has %d cells, want %d", got, n)
	}
	// Per-rack rollups name the failed and in-progress nodes; the racks'
	// nodes add up to the fleet.
	if got := evalString(t, tab, `layout.groups.filter(g => g.box).map(g => g.rollup).join(' | ')`); !strings.Contains(got, "✗") || !strings.Contains(got, "⟳") {
		t.Errorf("rack rollups %q: want failed (✗) and in progress (⟳) counts", got)
	}
	if got := evalIn[int](t, tab, `layout.groups.filter(g => g.box).reduce((a, g) => a + g.total, 0)`); got != n {
		t.Errorf("racks hold %d nodes, want %d", got, n)
	}
	if got := evalString(t, tab, `document.getElementById('counts-sum').textContent`); got != "1000 of 1000 nodes accounted for" {
		t.Errorf("counts: %q", got)
	}
	if got := evalIn[int](t, tab, `document.querySelectorAll('#failures .fp-group').length`); got != 1 {
		t.Errorf("%d failure groups, want 1 (one fingerprint)", got)
	}
	if got := evalString(t, tab, `document.querySelector('#failures .fp-group .fp-nodes').textContent.split(', ').length + ''`); got != "12" {
		t.Errorf("%s nodes in the failure group, want 12", got)
	}
	// The last page, then a search, reach every name.
	inTab(t, tab, "search", chromedp.SendKeys(chromedp.CSS(`#search`), "node-1000"))
	evalUntil(t, tab, 5*time.Second, "the search to find node-1000",
		`[...document.querySelectorAll('#node-rows tr[data-node]')].map(r => r.dataset.node).join() === 'node-1000'`)
	evalIn[bool](t, tab, `(() => { const s = document.getElementById('search'); s.value = ''; s.dispatchEvent(new Event('input')); return true; })()`)
	evalUntil(t, tab, 5*time.Second, "the whole list back", `document.getElementById('page').textContent === 'page 1 of 20 (1000 nodes)'`)

	// Hover and click the cell of the first failing node (the search above
	// scrolled the page).
	evalIn[bool](t, tab, `(() => { window.scrollTo(0, 0); return true; })()`)
	const first = "node-0701"
	cell := `cells.find(c => c.name === '` + first + `')`
	x := evalIn[float64](t, tab, `document.getElementById('map').getBoundingClientRect().left + `+cell+`.x + `+cell+`.s / 2`)
	y := evalIn[float64](t, tab, `document.getElementById('map').getBoundingClientRect().top + `+cell+`.y + `+cell+`.s / 2`)
	inTab(t, tab, "hover a cell", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y))
	evalUntil(t, tab, 5*time.Second, "the tip to name "+first, `document.getElementById('tip').textContent === '`+first+` — failed'`)
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shoot(t, tab, filepath.Join(dir, "dashboard-1000-nodes.png"))
	}
	inTab(t, tab, "click it", chromedp.MouseClickXY(x, y))
	evalUntil(t, tab, 5*time.Second, "the drawer of "+first+" with its check output", `!document.getElementById('drawer').hidden && document.getElementById('drawer-title').textContent === '`+first+`' &&
		(document.querySelector('#drawer .check-output') || {}).textContent === 'ping 10.0.0.1 via mgmt: 100% packet loss'`)
	// The drawer: the desired config against the backup, and the node's
	// operations (its own events, no other node's).
	evalUntil(t, tab, 10*time.Second, "the drawer's diff and operations", `document.querySelectorAll('#drawer .config-diff li').length === 2 &&
		document.querySelectorAll('#drawer .node-ops li').length === 3`)
	if got := evalString(t, tab, `[...document.querySelectorAll('#drawer .config-diff li')].map(li => li.dataset.op + ' ' + li.querySelector('code').textContent).join(' | ')`); got != "~ ~ layer2network/mgmt | + + layer2network/tenant-a" {
		t.Errorf("config diff %q, want mgmt changed and tenant-a added", got)
	}
	if got := evalString(t, tab, `document.querySelector('#drawer .node-ops').textContent`); !strings.Contains(got, "NodeConfigured") || !strings.Contains(got, "NodeInvalid") || strings.Contains(got, "node-0702") {
		t.Errorf("operations %q, want node-0701's own events", got)
	}
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		evalIn[bool](t, tab, `(() => { document.getElementById('drawer').scrollTop = 0; return true; })()`)
		shoot(t, tab, filepath.Join(dir, "dashboard-node-drawer.png"))
	}
	inTab(t, tab, "filter the events to it", chromedp.Click(chromedp.CSS(`#drawer-body button`)))
	evalUntil(t, tab, 10*time.Second, "the feed filtered to node-0701", `document.getElementById('event-node').value === 'node-0701' &&
		document.querySelectorAll('#event-list li').length === 3`)
	evalIn[bool](t, tab, `(() => { const n = document.getElementById('event-node'); n.value = ''; const r = document.getElementById('event-rollout'); r.value = '7-4ff435e62c9d'; r.dispatchEvent(new Event('input')); return true; })()`)
	evalUntil(t, tab, 10*time.Second, "the feed filtered to the rollout", `document.querySelectorAll('#event-list li').length === 4`)
	evalIn[bool](t, tab, `(() => { const r = document.getElementById('event-rollout'); r.value = '6-nothing'; r.dispatchEvent(new Event('input')); return true; })()`)
	evalUntil(t, tab, 10*time.Second, "no event of another rollout", `document.querySelectorAll('#event-list li').length === 0`)
	evalIn[bool](t, tab, `(() => { const r = document.getElementById('event-rollout'); r.value = ''; r.dispatchEvent(new Event('input')); return true; })()`)
	inTab(t, tab, "close the drawer", chromedp.Click(chromedp.CSS(`#drawer-close`)))

	// The rollout: every planned wave against what ran, the estimate against
	// the ideal time.
	if got := evalString(t, tab, `[...document.querySelectorAll('#timeline > li')].map(li => li.dataset.wave + ':' + li.dataset.state).join(' ')`); got != "1:done 2:done 3:done 4:done 5:running 6:planned 7:planned" {
		t.Errorf("timeline %q, want waves 1-4 done, 5 running, 6 and 7 planned (10, 20, 40, 80, 160, 320, 370 nodes)", got)
	}
	if got := evalString(t, tab, `document.getElementById('eta').textContent`); !strings.Contains(got, "ETA ") || !strings.Contains(got, "against the ideal") {
		t.Errorf("estimate %q, want an ETA against the ideal time", got)
	}
	// The control plane: the coordinator, the freeze, the registry's pending deletions.
	if got := evalString(t, tab, `document.getElementById('coordinator').textContent`); !strings.Contains(got, "leadercoord-a") || !strings.Contains(got, "term7") ||
		!strings.Contains(got, "after its last renewal") || !strings.Contains(got, "coord-b (standby)") {
		t.Errorf("coordinator %q, want coord-a leading term 7, the lease's expiry and coord-b standing by", got)
	}
	if got := evalString(t, tab, `[...document.querySelectorAll('#pause-instances li')].map(li => li.textContent).join(' | ')`); got != "rollout-coordinator coord-a (leader): no pause seen | rollout-coordinator coord-b (standby): no pause seen" {
		t.Errorf("pause per instance %q, want both coordinator instances", got)
	}
	if got := evalString(t, tab, `(document.querySelector('#freezes [data-freeze="change-freeze"]') || {}).textContent || ''`); !strings.Contains(got, "datacenter maintenance") {
		t.Errorf("freeze %q", got)
	}
	if got := evalIn[int](t, tab, `document.querySelectorAll('#registries [data-registry="gitops"] li[data-intent]').length`); got != 2 {
		t.Errorf("%d pending deletions of gitops shown, want 2", got)
	}
	// Undo to the revision of a history row: its command, confirmed, run.
	undo := `#history tr[data-rollout="6-3aa0c1d2e3f4"] button[data-action="undo"]`
	inTab(t, tab, "undo to revision 3aa0c1d2e3f4", chromedp.ScrollIntoView(chromedp.CSS(undo)), chromedp.Click(chromedp.CSS(undo)))
	evalUntil(t, tab, 10*time.Second, "the undo's command", `document.getElementById('confirm-command').textContent === 'sluice rollout undo --to-revision 3aa0c1d2e3f4a5b6'`)
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shoot(t, tab, filepath.Join(dir, "dashboard-confirm-undo.png"))
	}
	inTab(t, tab, "run it", chromedp.Click(chromedp.CSS(`#confirm-run`)))
	evalUntil(t, tab, 10*time.Second, "its output", `document.getElementById('confirm-output').textContent.startsWith('back from revision')`)
	ranMu.Lock()
	if len(ran) != 1 || strings.Join(ran[0], " ") != "rollout undo --to-revision 3aa0c1d2e3f4a5b6" {
		t.Errorf("ran %q, want rollout undo --to-revision 3aa0c1d2e3f4a5b6", ran)
	}
	ranMu.Unlock()
	evalUntil(t, tab, 10*time.Second, "the feed to name who undid", `[...document.querySelectorAll('#event-list li')].some(li =>
		li.textContent.includes('alice@ops-1 via the dashboard from 127.0.0.1:') && li.textContent.includes('ran sluice rollout undo --to-revision 3aa0c1d2e3f4a5b6'))`)
	inTab(t, tab, "close the confirmation", chromedp.Click(chromedp.CSS(`#confirm-cancel`)))

	// A bake, then a window to wait for: both count down.
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if _, err := rollouts.Mutate(context.Background(), "7-4ff435e62c9d", func(r *sluicev1.Rollout) (*sluicev1.Rollout, error) {
		r.BakeUntil = timestamppb.New(time.Now().Add(40 * time.Second))
		r.Waiting, r.WaitingUntil = "waiting for the window Mon-Fri 09:00-16:00 Europe/Berlin", timestamppb.New(time.Now().Add(3*time.Hour+25*time.Minute))
		return r, nil
	}); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, tab, 10*time.Second, "the bake and the window counting down", `!document.getElementById('bake').hidden && /^baking: \d+s left/.test(document.getElementById('bake').textContent) &&
		document.getElementById('waiting').textContent.includes('3h2') && document.getElementById('waiting').textContent.includes('to go')`)
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shootElement(t, tab, "#rollout", filepath.Join(dir, "dashboard-rollout.png"))
		shootElement(t, tab, "#plane", filepath.Join(dir, "dashboard-control-plane.png"))
		shootElement(t, tab, "#events", filepath.Join(dir, "dashboard-events.png"))
	}
}

// shootElement writes a PNG screenshot of the element sel.
func shootElement(t *testing.T, tab context.Context, sel, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot %s: %v", sel, err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// shoot writes a PNG screenshot of the viewport.
func shoot(t *testing.T, tab context.Context, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// TestDashboard_TokenLogin_InBrowser: a dashboard with a token shows the
// page's login first; the token entered once is kept in the cookie, and
// the fleet appears; a reload needs no second login.
func TestDashboard_TokenLogin_InBrowser(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedRollingFleet(t, env, 20)
	const token = "a-token-of-at-least-16-characters"
	url := serveDashboard(t, env, dashboard.Options{Token: token})

	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
	evalUntil(t, tab, 10*time.Second, "the login to open", `document.getElementById('login').open`)
	if got := evalIn[int](t, tab, `document.querySelectorAll('#node-rows tr').length`); got != 0 {
		t.Errorf("%d nodes listed before logging in", got)
	}
	inTab(t, tab, "log in with a wrong token", chromedp.SendKeys(chromedp.CSS(`#login-token`), "wrong-wrong-wrong-wrong"), chromedp.Click(chromedp.CSS(`#login-form button`)))
	evalUntil(t, tab, 5*time.Second, "the wrong token refused", `document.getElementById('login-error').textContent === 'wrong token'`)
	evalIn[bool](t, tab, `(() => { document.getElementById('login-token').value = ''; return true; })()`)
	inTab(t, tab, "log in", chromedp.SendKeys(chromedp.CSS(`#login-token`), token), chromedp.Click(chromedp.CSS(`#login-form button`)))
	evalUntil(t, tab, 10*time.Second, "the fleet after logging in", `!document.getElementById('login').open && document.getElementById('fleet-count').textContent === '20 nodes'`)
	if got := evalString(t, tab, `document.cookie`); got != "" {
		t.Errorf("a script reads the cookie %q; want it HttpOnly", got)
	}
	inTab(t, tab, "reload", chromedp.Navigate(url))
	evalUntil(t, tab, 10*time.Second, "the fleet after a reload, without a login", `document.getElementById('fleet-count').textContent === '20 nodes'`)
	if evalIn[bool](t, tab, `document.getElementById('login').open`) {
		t.Error("the login opened again after a reload")
	}
}

// serveDashboard serves a dashboard with opts (Addr 127.0.0.1:0) against
// env until the test ends, and returns its page's URL.
func serveDashboard(t *testing.T, env *natstest.Env, opts dashboard.Options) string {
	t.Helper()
	opts.Addr, opts.JS = "127.0.0.1:0", env.JS
	srv, err := dashboard.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String() + "/"
}
