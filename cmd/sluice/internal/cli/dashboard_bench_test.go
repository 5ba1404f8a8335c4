//go:build dashboardbench

package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
)

// renderBench, run in the page: parse and apply a snapshot of n nodes and
// wait for the frame that paints it; then, for seconds, play a rollout at
// maxParallel 1000 (every 250 ms, one update: 1000 nodes start, the 1000
// started before finish, as the stream would send them) and count the
// frames the browser painted meanwhile.
const renderBench = `(async (n, seconds) => {
  const zones = ['zone-a', 'zone-b', 'zone-c'];
  const name = (i) => 'node-' + String(i).padStart(6, '0');
  // The stream's compact fleet (internal/dashboard/compact.go): columns, strings by index.
  const domains = [[]];
  for (let z = 0; z < 3; z++) for (let r = 1; r <= 40; r++) domains.push([zones[z], 'rack-' + r]);
  const domainOf = (i) => 1 + (i % 3) * 40 + Math.floor(i / 3) % 40;
  const fleet = (idx, phase, rev) => ({ groupBy: ['zone', 'rack'], names: idx.map(name), present: '1'.repeat(idx.length),
    phase: idx.map(() => phase), revision: idx.map(() => rev), rollout: idx.map(() => 1), domain: idx.map(domainOf),
    phases: ['', 'NODE_PHASE_PROVISIONED', 'NODE_PHASE_PROVISIONING'], revisions: ['', 'rev-1', 'rev-2'], rollouts: ['', '2-rev2'], domains });
  const all = [];
  for (let i = 0; i < n; i++) all.push(i);
  const snapshot = JSON.stringify({ reset: true, fleet: fleet(all, 1, 1), rollouts: [{ id: '2-rev2', revision: 'rev-2', phase: 'ROLLOUT_PHASE_PROGRESSING',
    counts: { total: n, pending: n } }], active: '2-rev2' });
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const t0 = performance.now();
  apply(JSON.parse(snapshot));
  await frame(); await frame();
  const firstPaint = performance.now() - t0;

  let frames = 0, worst = 0, last = performance.now(), running = true;
  const count = () => { const now = performance.now(); worst = Math.max(worst, now - last); last = now; frames++; if (running) requestAnimationFrame(count); };
  requestAnimationFrame(count);
  const start = performance.now();
  let next = 0, updates = 0, applyMs = 0;
  while (performance.now() - start < seconds * 1000) {
    const started = [], finished = [];
    for (let k = 0; k < 1000; k++) started.push((next + k) % n);
    if (next >= 1000) for (let k = 0; k < 1000; k++) finished.push((next - 1000 + k + n) % n);
    next = (next + 1000) % n;
    // One update holds one fleet: the started (Provisioning) and the finished (Provisioned).
    const f = fleet(started.concat(finished), 2, 2);
    for (let k = started.length; k < f.phase.length; k++) f.phase[k] = 1;
    const msg = JSON.stringify({ fleet: f });
    const a = performance.now();
    apply(JSON.parse(msg));
    applyMs += performance.now() - a;
    updates++;
    await new Promise(r => setTimeout(r, 250));
  }
  running = false;
  const elapsed = (performance.now() - start) / 1000;
  return { nodes: n, snapshotBytes: snapshot.length, firstPaintMs: Math.round(firstPaint), fps: Math.round(frames / elapsed * 10) / 10,
    worstFrameMs: Math.round(worst), updates, meanApplyMs: Math.round(applyMs / updates * 10) / 10 };
})`

type benchResult struct {
	Nodes         int
	SnapshotBytes int
	FirstPaintMs  float64
	Fps           float64
	WorstFrameMs  float64
	Updates       int
	MeanApplyMs   float64
}

// TestDashboard_RenderBench (make bench-dashboard): how long the page takes
// to paint 10,000 and 100,000 nodes, and the frames per second it keeps
// during a rollout at maxParallel 1000. It reports; it fails only if the
// page cannot do it at all.
func TestDashboard_RenderBench(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	url := serveDashboard(t, env, dashboard.Options{})
	for _, n := range []int{10_000, 100_000} {
		tab := browser(t)
		inTab(t, tab, "open the dashboard", chromedp.Navigate(url))
		evalUntil(t, tab, 15*time.Second, "the page to connect", `document.getElementById('conn').dataset.state === 'live'`)
		// The page's own stream would reset it: stop it, as a hidden tab does.
		evalIn[bool](t, tab, `(() => { disconnect(); return true; })()`)
		rctx, rcancel := context.WithTimeout(tab, 2*time.Minute)
		r, err := chromedp.Run(rctx, chromedp.Evaluate[benchResult](fmt.Sprintf("%s(%d, %d)", renderBench, n, 5), chromedp.EvalAwaitPromise))
		rcancel()
		if err != nil {
			t.Fatalf("%d nodes: %v", n, err)
		}
		t.Logf("BENCH dashboard %d nodes: snapshot %.2f MB of JSON, first paint %.0f ms; during a rollout at maxParallel 1000: %.1f frames/s, worst frame %.0f ms, %d updates applied in %.1f ms each",
			n, float64(r.SnapshotBytes)/1e6, r.FirstPaintMs, r.Fps, r.WorstFrameMs, r.Updates, r.MeanApplyMs)
	}
}

// TestDashboard_ServerBench (make bench-dashboard): what the server costs
// at 10,000 nodes: how long it takes to read them all, to answer
// /api/v1/fleet and to send a viewer its first snapshot, and how big they are.
func TestDashboard_ServerBench(t *testing.T) {
	const n = 10_000
	env := natstest.Start(t, contract.DefaultSettings())
	began := time.Now()
	seedRollingFleet(t, env, n)
	seeded := time.Since(began)
	began = time.Now()
	url := serveDashboard(t, env, dashboard.Options{})
	natstest.Eventually(t, time.Minute, "the dashboard to hold every node", func() bool {
		resp, err := http.Get(url + "api/v1/config")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var c struct{ Ready bool }
		return json.NewDecoder(resp.Body).Decode(&c) == nil && c.Ready
	})
	ready := time.Since(began)
	began = time.Now()
	resp, err := http.Get(url + "api/v1/fleet")
	if err != nil {
		t.Fatal(err)
	}
	fleet, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fleetTook := time.Since(began)
	req, _ := http.NewRequest(http.MethodGet, url+"api/v1/fleet", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	zipped, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	began = time.Now()
	resp, err = http.Get(url + "api/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	var snapshot int
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			snapshot = len(line) - len("data: ")
			break
		}
	}
	snapTook := time.Since(began)
	resp.Body.Close()
	t.Logf("BENCH dashboard server %d nodes (seeded in %s): all read in %s; GET /api/v1/fleet %s, %.1f MB (%.2f MB gzipped); first snapshot %s, %.1f MB",
		n, seeded.Round(time.Millisecond), ready.Round(time.Millisecond), fleetTook.Round(time.Millisecond), float64(len(fleet))/1e6, float64(len(zipped))/1e6,
		snapTook.Round(time.Millisecond), float64(snapshot)/1e6)
}
