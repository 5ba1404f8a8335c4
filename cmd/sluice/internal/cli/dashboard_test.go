package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// browser starts headless Chromium (Debian's chromium: make chromium
// installs it) and returns a tab's context, closed at cleanup.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (%v): the dashboard's browser tests need it; run make chromium (apt-get install chromium)", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs chromedp actions in tab, failing the test on an error.
func inTab(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// evalUntil polls a JavaScript expression in tab until it is true.
func evalUntil(t *testing.T, tab context.Context, timeout time.Duration, what, expr string) {
	t.Helper()
	natstest.Eventually(t, timeout, what, func() bool {
		ctx, cancel := context.WithTimeout(tab, 5*time.Second)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		return err == nil && ok
	})
}

func evalString(t *testing.T, tab context.Context, expr string) string {
	t.Helper()
	return evalIn[string](t, tab, expr)
}

// evalIn evaluates a JavaScript expression in tab as T.
func evalIn[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// node03Check fails node-03's health check whenever its mgmt table is 110
// to 119 (the README's demo check).
const node03Check = "../../../../examples/checks/node-03-needs-table-10.sh"

// TestDashboard_InBrowser: against sluice dev --secure with five agents,
// headless Chromium shows every node; a rollout's node status writes
// reach the page within a second each; a failing check appears grouped
// under its fingerprint with the check's output; pause from the page is
// acknowledged as sluice get pause shows it; a hidden tab stops streaming
// and catches up when shown; and a dashboard with readonly credentials
// disables every control, saying why.
func TestDashboard_InBrowser(t *testing.T) {
	start := time.Now()
	var logs lockedBuffer
	a := &app{streams: Streams{Out: &logs, Err: &logs}, version: "test", now: time.Now}
	s, err := dev.Start(context.Background(), dev.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: 5, Stderr: &logs, Secure: true,
		CheckCmds: []string{node03Check},
		Dashboard: a.devDashboard(dashboardFlags{addr: "127.0.0.1:0", groupBy: "zone,rack"}),
	})
	if err != nil {
		t.Fatalf("start sluice dev --secure: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, logs.String())
		}
	})
	admin := s.AdminCreds()
	as := func(args ...string) (int, string, string) {
		return sluice(t, s.URL(), append([]string{"--creds", admin}, args...)...)
	}
	adm := &app{server: s.URL()}
	adm.auth.Creds = admin
	nc, js, err := adm.jetStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	t.Logf("sluice dev --secure started in %s; dashboard %s", time.Since(start).Round(time.Millisecond), s.DashboardURL())

	tab := browser(t)
	inTab(t, tab, "open the dashboard", chromedp.Navigate(s.DashboardURL()))

	t.Run("ShowsEveryNode", func(t *testing.T) {
		evalUntil(t, tab, 15*time.Second, "the list to name node-01 … node-05",
			`[...document.querySelectorAll('#node-rows tr[data-node]')].map(r => r.dataset.node).join(',') === 'node-01,node-02,node-03,node-04,node-05'`)
		if got := evalString(t, tab, `document.getElementById('fleet-count').textContent`); got != "5 nodes" {
			t.Errorf("fleet count %q, want 5 nodes", got)
		}
		// The map drew a cell per node: the canvas is not blank.
		evalUntil(t, tab, 5*time.Second, "the map to draw cells", `(() => { const c = document.getElementById('map');
			const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
			for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) return true; return false; })()`)
	})

	t.Run("ProgressReachesThePageWithinASecond", func(t *testing.T) {
		evalIn[bool](t, tab, `(() => {
			window.__seen = []; window.__last = {};
			const note = () => { for (const tr of document.querySelectorAll('#node-rows tr[data-node]')) {
				const k = tr.dataset.phase + '|' + tr.dataset.revision;
				if (window.__last[tr.dataset.node] !== k) { window.__last[tr.dataset.node] = k;
					window.__seen.push({node: tr.dataset.node, phase: tr.dataset.phase, revision: tr.dataset.revision, at: Date.now()}); } } };
			note();
			new MutationObserver(note).observe(document.getElementById('node-rows'), {childList: true, subtree: true, attributes: true});
			return true; })()`)
		writes := watchStatusWrites(t, js)
		if code, out, stderr := as("apply", "-f", writeFile(t, "a.yaml", tenantA), "--max-parallel", "2"); code != 0 {
			t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
		}
		if code, out, stderr := as("rollout", "status", "--watch"); code != 0 {
			t.Fatalf("rollout status --watch: exit %d\n%s%s", code, out, stderr)
		}
		time.Sleep(time.Second) // the last writes' way to the page, which the check below measures
		seen := evalIn[[]domState](t, tab, `window.__seen`)
		lat := latencies(t, writes(), seen)
		if len(lat) < 5 {
			// One per node: its outcome (an apply shorter than a second is
			// not acknowledged first: docs/agent.md).
			t.Fatalf("%d status writes measured, want at least 5 (one per node): %v", len(lat), lat)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("KV status write → DOM over %d writes: median %s, max %s", len(lat), lat[len(lat)/2], lat[len(lat)-1])
		if max := lat[len(lat)-1]; max > time.Second {
			t.Errorf("a status write took %s to reach the page, want ≤ 1s", max)
		}
	})

	t.Run("FailingCheckGroupedUnderItsFingerprint", func(t *testing.T) {
		bad := strings.Replace(tenantA, "tableId: 100", "tableId: 110", 1)
		if code, out, stderr := as("apply", "-f", writeFile(t, "bad.yaml", bad)); code != 0 {
			t.Fatalf("apply: exit %d\n%s%s", code, out, stderr)
		}
		if code, out, _ := as("rollout", "status", "--watch"); code != ExitRolledBack {
			t.Fatalf("rollout status --watch: exit %d, want %d (rolled back)\n%s", code, ExitRolledBack, out)
		}
		_, out, _ := as("get", "fingerprints", "-o", "json")
		var fps struct {
			Items []*struct{ Fingerprint, Node, Output string }
		}
		if err := json.Unmarshal([]byte(out), &fps); err != nil || len(fps.Items) != 1 {
			t.Fatalf("get fingerprints: %v\n%s", err, out)
		}
		fp := fps.Items[0].Fingerprint
		group := `document.querySelector('#failures .fp-group[data-fingerprint="` + fp + `"]')`
		evalUntil(t, tab, 5*time.Second, "the failure grouped under "+fp[:12], group+` !== null`)
		if got := evalString(t, tab, group+`.querySelector('.fp-first-node').textContent`); got != "node-03" {
			t.Errorf("first failing node %q, want node-03", got)
		}
		if got := evalString(t, tab, group+`.querySelector('.fp-output').textContent`); !strings.Contains(got, "100% packet loss") {
			t.Errorf("check output %q, want the check's 100%% packet loss", got)
		}
		// What followed, timed from node-03's failure event to the rollback's.
		evalUntil(t, tab, 5*time.Second, "what followed the failure", group+`.querySelector('.fp-followed') !== null &&
			/^node-03 failed .+ → \d+ touched nodes? reverted in \d+ ms; the rollout ended RolledBack$/.test(`+group+`.querySelector('.fp-followed').textContent)`)
		t.Logf("what followed: %s", evalString(t, tab, group+`.querySelector('.fp-followed').textContent`))
		// node-03 is drawn where its revert is, saying it failed first.
		if got := evalString(t, tab, `(() => { const r = document.querySelector('#node-rows tr[data-node="node-03"]'); return r.dataset.state + ': ' + r.querySelector('.phase-cell').textContent; })()`); got != "reverted: reverted (it failed first)" {
			t.Errorf("node-03 shown as %q, want reverted, saying it failed first", got)
		}
		// History: the rollback above the rollout before it, in get rollouts' words.
		evalUntil(t, tab, 5*time.Second, "the history to list both rollouts", `[...document.querySelectorAll('#history tr')].map(r => r.dataset.phase).join() === 'RolledBack,Succeeded'`)
		// The events feed, filtered to the rollouts' events, tells the story.
		evalIn[bool](t, tab, `(() => { const k = document.getElementById('event-kind'); k.value = 'rollout'; k.dispatchEvent(new Event('change')); return true; })()`)
		evalUntil(t, tab, 5*time.Second, "the events of kind rollout, the rollback among them", `(() => {
			const items = [...document.querySelectorAll('#event-list li')].map(li => li.textContent);
			return items.length > 0 && items.every(s => s.includes(' rollout/')) && items.some(s => s.includes('RolledBack')); })()`)
		evalIn[bool](t, tab, `(() => { const k = document.getElementById('event-kind'); k.value = ''; k.dispatchEvent(new Event('change')); return true; })()`)
	})

	t.Run("PauseFromThePageIsAcknowledged", func(t *testing.T) {
		inTab(t, tab, "pause from the page",
			chromedp.Click(chromedp.CSS(`header button[data-action="pause"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.SendKeys(chromedp.CSS(`#confirm-reason`), "maintenance"))
		evalUntil(t, tab, 5*time.Second, "the confirmation to show the command",
			`document.getElementById('confirm-command').textContent === 'sluice pause --reason maintenance'`)
		inTab(t, tab, "run it", chromedp.Click(chromedp.CSS(`#confirm-run`)))
		evalUntil(t, tab, 20*time.Second, "the command to succeed", `document.getElementById('confirm-output').dataset.ok === 'true'`)
		evalUntil(t, tab, 20*time.Second, "every instance to acknowledge the pause on the page",
			`(() => { const p = document.getElementById('pause-state'); return p.dataset.paused === 'true' && p.dataset.reached === 'true'; })()`)
		shown := evalString(t, tab, `document.getElementById('pause-state').textContent`)
		_, out, stderr := as("get", "pause", "-o", "json")
		var pause struct {
			Request struct {
				Paused     bool
				Generation int
				Reason, By string
			}
			Items []json.RawMessage
		}
		if err := json.Unmarshal([]byte(out), &pause); err != nil || len(pause.Items) < 1 {
			t.Fatalf("get pause: %v\n%s%s", err, out, stderr)
		}
		req := pause.Request
		if !req.Paused || req.Reason != "maintenance" || !strings.Contains(shown, fmt.Sprintf("paused (generation %d)", req.Generation)) ||
			!strings.Contains(shown, fmt.Sprintf("reached by %d/%d", len(pause.Items), len(pause.Items))) {
			t.Errorf("the page shows %q; sluice get pause: %s", shown, out)
		}
		// Who paused: the request names the dashboard's user and its
		// credentials, and an event says who ran which command from where.
		if !strings.Contains(req.By, "via the dashboard (credentials admin.creds)") {
			t.Errorf("the pause request is by %q, want the dashboard's user via the dashboard with its credentials", req.By)
		}
		evalUntil(t, tab, 5*time.Second, "the feed to record who paused", `[...document.querySelectorAll('#event-list li')].some(li =>
			/ControlRan +control\/pause/.test(li.textContent) && li.textContent.includes('via the dashboard (credentials admin.creds) from 127.0.0.1:') &&
			li.textContent.includes('ran sluice pause --reason maintenance'))`)
		inTab(t, tab, "close", chromedp.Click(chromedp.CSS(`#confirm-cancel`)))
		if code, out, stderr := as("resume", "--wait"); code != 0 {
			t.Fatalf("resume: exit %d\n%s%s", code, out, stderr)
		}
	})

	t.Run("HiddenTabStopsStreamingThenResumes", func(t *testing.T) {
		setHidden := func(hidden bool) {
			evalIn[bool](t, tab, fmt.Sprintf(`(() => { Object.defineProperty(document, 'hidden', {value: %t, configurable: true});
				document.dispatchEvent(new Event('visibilitychange')); return true; })()`, hidden))
		}
		evalUntil(t, tab, 5*time.Second, "the page to show the control plane running", `document.getElementById('pause-state').dataset.paused === 'false'`)
		setHidden(true)
		if got := evalString(t, tab, `document.getElementById('conn').textContent`); got != "paused while hidden" {
			t.Errorf("hidden tab's connection badge %q", got)
		}
		lastID := evalString(t, tab, `S.lastId`)
		if code, out, stderr := as("pause", "--reason", "while hidden", "--wait"); code != 0 {
			t.Fatalf("pause: exit %d\n%s%s", code, out, stderr)
		}
		time.Sleep(600 * time.Millisecond) // two update intervals: a stream still open would have delivered
		if got := evalString(t, tab, `S.lastId`); got != lastID {
			t.Errorf("a hidden tab received updates (last id %s → %s)", lastID, got)
		}
		setHidden(false)
		evalUntil(t, tab, 5*time.Second, "the shown tab to catch up with the pause", `document.getElementById('pause-state').dataset.paused === 'true'`)
		if code, out, stderr := as("resume", "--wait"); code != 0 {
			t.Fatalf("resume: exit %d\n%s%s", code, out, stderr)
		}
	})

	t.Run("ReadonlyCredentialsDisableTheControls", func(t *testing.T) {
		code, out, stderr := sluice(t, s.URL(), "creds", "issue", "readonly", "--dir", s.Creds().Dir)
		if code != 0 {
			t.Fatalf("creds issue readonly: exit %d: %s", code, stderr)
		}
		ro := &app{streams: a.streams, version: "test", now: time.Now, server: s.URL()}
		ro.auth.Creds = strings.TrimSpace(out)
		url, serve, err := ro.startDashboard(dashboardFlags{addr: "127.0.0.1:0", groupBy: "zone,rack"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- serve(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		inTab(t, tab, "open the readonly dashboard", chromedp.Navigate(url))
		evalUntil(t, tab, 15*time.Second, "the readonly dashboard to list the nodes", `document.querySelectorAll('#node-rows tr[data-node]').length === 5`)
		evalUntil(t, tab, 5*time.Second, "every control disabled",
			`[...document.querySelectorAll('button.control')].length >= 7 && [...document.querySelectorAll('button.control')].every(b => b.disabled)`)
		if why := evalString(t, tab, `document.getElementById('readonly').textContent`); !strings.Contains(why, "readonly role") {
			t.Errorf("the reason shown is %q, want it to name the readonly role", why)
		}
		// The API refuses too, whatever the page does.
		resp, err := http.Post(url+"api/v1/control", "application/json", strings.NewReader(`{"action":"pause","confirm":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("a control with readonly credentials: %s, want 403", resp.Status)
		}
	})
	t.Logf("TestDashboard_InBrowser took %s", time.Since(start).Round(time.Millisecond))
}

// statusWrite is a node's status as stored, and when.
type statusWrite struct {
	node, phase, revision string
	at                    time.Time
}

// domState is what the page's node list showed for a node, and when.
type domState struct {
	Node, Phase, Revision string
	At                    float64 // ms since the epoch (Date.now())
}

// watchStatusWrites records every status write from now on.
func watchStatusWrites(t *testing.T, js jetstream.JetStream) func() []statusWrite {
	kv, err := js.KeyValue(context.Background(), contract.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(context.Background(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	var mu sync.Mutex
	var writes []statusWrite
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			st := &sluicev1.NodeStatus{}
			if store.Unmarshal(e.Value(), st) != nil {
				continue
			}
			mu.Lock()
			writes = append(writes, statusWrite{e.Key(), nodePhase(st.GetPhase()), st.GetRevision(), e.Created()})
			mu.Unlock()
		}
	}()
	return func() []statusWrite {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(writes)
	}
}

// latencies measures, for each status write, how long until the page
// showed it (or a later write of the same node, which replaced it before
// an update went out): 0 when the page already showed that state.
func latencies(t *testing.T, writes []statusWrite, seen []domState) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i, w := range writes {
		states := map[string]bool{}
		for _, later := range writes[i:] {
			if later.node == w.node {
				states[later.phase+"|"+later.revision] = true
			}
		}
		at := float64(w.at.UnixNano()) / 1e6
		var before *domState
		var after *domState
		for j := range seen {
			d := &seen[j]
			if d.Node != w.node {
				continue
			}
			if d.At <= at {
				before = d
			} else if after == nil && states[d.Phase+"|"+d.Revision] {
				after = d
			}
		}
		switch {
		case before != nil && before.Phase == w.phase && before.Revision == w.revision:
			out = append(out, 0)
		case after != nil:
			out = append(out, time.Duration((after.At-at)*float64(time.Millisecond)))
		default:
			t.Errorf("status write %s %s %s at %s never reached the page", w.node, w.phase, short(w.revision), w.at.Format("15:04:05.000"))
		}
	}
	return out
}
