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
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
)

// renderBench, run in the page: parse and apply a snapshot of n nodes and
// wait for the frame that paints it; then, for seconds, play a rollout at
// maxParallel 1000 (every 250 ms, one update: 1000 nodes start, the 1000
// started before finish, as the stream would send them) and count the
// frames the browser painted meanwhile.
const renderBench = `(async (n, seconds) => {
  const zones = ['zone-a', 'zone-b', 'zone-c'];
  const node = (i, phase, rev) => ({ node: 'node-' + String(i).padStart(6, '0'), present: true,
    presence: { node: 'node-' + String(i).padStart(6, '0'), labels: { zone: zones[i % 3], rack: 'rack-' + (1 + Math.floor(i / 3) % 40) } },
    status: { node: 'node-' + String(i).padStart(6, '0'), phase, revision: rev } });
  const nodes = [];
  for (let i = 0; i < n; i++) nodes.push(node(i, 'NODE_PHASE_PROVISIONED', 'rev-1'));
  const snapshot = JSON.stringify({ reset: true, nodes, rollouts: [{ id: '2-rev2', revision: 'rev-2', phase: 'ROLLOUT_PHASE_PROGRESSING',
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
    const batch = [];
    for (let k = 0; k < 1000; k++) { const i = (next + k) % n; batch.push(node(i, 'NODE_PHASE_PROVISIONING', 'rev-2')); }
    for (let k = 0; k < 1000; k++) { const i = (next - 1000 + k + n) % n; if (next >= 1000) batch.push(node(i, 'NODE_PHASE_PROVISIONED', 'rev-2')); }
    next = (next + 1000) % n;
    const msg = JSON.stringify({ nodes: batch });
    const a = performance.now();
    apply(JSON.parse(msg));
    applyMs += performance.now() - a;
    updates++;
    await new Promise(r => setTimeout(r, 250));
  }
  running = false;
  const elapsed = (performance.now() - start) / 1000;
  return { nodes: n, firstPaintMs: Math.round(firstPaint), fps: Math.round(frames / elapsed * 10) / 10,
    worstFrameMs: Math.round(worst), updates, meanApplyMs: Math.round(applyMs / updates * 10) / 10 };
})`

type benchResult struct {
	Nodes        int
	FirstPaintMs float64
	Fps          float64
	WorstFrameMs float64
	Updates      int
	MeanApplyMs  float64
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
		t.Logf("BENCH dashboard %d nodes: first paint %.0f ms; during a rollout at maxParallel 1000: %.1f frames/s, worst frame %.0f ms, %d updates applied in %.1f ms each",
			n, r.FirstPaintMs, r.Fps, r.WorstFrameMs, r.Updates, r.MeanApplyMs)
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
