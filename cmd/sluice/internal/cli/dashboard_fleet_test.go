package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
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
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	r := &sluicev1.Rollout{Id: "7-4ff435e62c9d", Revision: "4ff435e62c9d0000", PreviousRevision: "3aa0", Generation: 7,
		Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, StartedAt: timestamppb.New(now.Add(-3 * time.Minute)), UpdatedAt: ts,
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
			st.Revision, st.Rollout = "3aa0", "6-3aa0"
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
	for w := uint32(1); w <= 5; w++ {
		st := &sluicev1.StageResult{Wave: w, Domain: "zone-" + string(rune('a'+(w-1)%3)), StartedAt: ts, Nodes: 10 << (w - 1), Provisioned: 10 << (w - 1)}
		if w < 5 {
			st.EndedAt = ts
		} else {
			st.Provisioned, st.Failed, st.TimedOut = st.Nodes-12, 12, 4
		}
		r.Stages = append(r.Stages, st)
	}
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if _, err := rollouts.Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: r.Id, Revision: r.Revision, Generation: 7}); err != nil {
		t.Fatal(err)
	}
	fps := store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	if _, err := fps.Create(ctx, badFP, &sluicev1.InvalidFingerprint{Fingerprint: badFP, Revision: r.Revision, Rollout: r.Id, Node: r.Failures[0].GetNode(),
		Cause: "check-failed", Check: "mgmt-reachable", Output: "ping 10.0.0.1 via mgmt: 100% packet loss", Time: ts}); err != nil {
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
	url := serveDashboard(t, env, dashboard.Options{Readonly: "this test serves no controls"})

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

	// Hover and click the cell of the first failing node.
	const first = "node-0701"
	cell := `cells.find(c => c.name === '` + first + `')`
	x := evalIn[float64](t, tab, `document.getElementById('map').getBoundingClientRect().left + `+cell+`.x + `+cell+`.s / 2`)
	y := evalIn[float64](t, tab, `document.getElementById('map').getBoundingClientRect().top + `+cell+`.y + `+cell+`.s / 2`)
	inTab(t, tab, "hover a cell", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, x, y))
	evalUntil(t, tab, 5*time.Second, "the tip to name "+first, `document.getElementById('tip').textContent === '`+first+` — Invalid'`)
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shoot(t, tab, filepath.Join(dir, "dashboard-1000-nodes.png"))
	}
	inTab(t, tab, "click it", chromedp.MouseClickXY(x, y))
	evalUntil(t, tab, 5*time.Second, "the drawer of "+first+" with its check output", `!document.getElementById('drawer').hidden && document.getElementById('drawer-title').textContent === '`+first+`' &&
		(document.querySelector('#drawer .check-output') || {}).textContent === 'ping 10.0.0.1 via mgmt: 100% packet loss'`)
	if dir := os.Getenv(EnvScreenshots); dir != "" {
		shoot(t, tab, filepath.Join(dir, "dashboard-node-drawer.png"))
	}
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
