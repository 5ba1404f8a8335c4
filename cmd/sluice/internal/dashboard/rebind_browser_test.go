package dashboard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// cliRunner runs controls as `sluice dashboard` does: the CLI's own
// commands against env, so a control that gets through writes its request.
func cliRunner(env *natstest.Env) dashboard.Runner {
	return func(ctx context.Context, args []string) (string, error) {
		var out bytes.Buffer
		if code := cli.Run(ctx, append([]string{"--server", env.URL}, args...), cli.Streams{Out: &out, Err: &out}, "test"); code != 0 {
			return out.String(), fmt.Errorf("%s exited %d", dashboard.CommandLine(args), code)
		}
		return out.String(), nil
	}
}

// pauseStored says whether a pause request is stored (what a control that
// got through would have written).
func pauseStored(t *testing.T, env *natstest.Env) bool {
	t.Helper()
	_, err := env.Buckets.Control.Get(context.Background(), contract.KeyPause)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("read the pause: %v", err)
	}
	return true
}

// portOf is the port of an http://host:port URL.
func portOf(t *testing.T, url string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// rebindingBrowser starts headless Chromium (make chromium installs it)
// resolving evil.example to 127.0.0.1: what a browser does once a
// rebinding DNS server answered it so. A page at http://evil.example:PORT
// is then same-origin with every request it makes to that name, while the
// connections reach whatever listens on 127.0.0.1:PORT.
func rebindingBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (%v): the dashboard's browser tests need it; run make chromium (apt-get install chromium)", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// jsIn evaluates expr (a promise's value is awaited) in tab as a list of
// strings.
func jsIn(t *testing.T, tab context.Context, expr string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// attack is what a hostile page's script runs against the dashboard at
// base ("" for its own origin): a confirmed pause as the dashboard's page
// sends it, the same as a simple request that needs no preflight, and a
// read of a node's whole object. It answers what each got, in that order.
const attack = `(async (base) => {
	const got = async (p) => { try { const r = await p; return r.type === 'opaque' ? 'opaque' : r.status + ' ' + (await r.text()).slice(0, 300); } catch (e) { return 'failed: ' + e.name; } };
	const body = JSON.stringify({action: 'pause', reason: 'rebound', confirm: true});
	return [
		await got(fetch(base + '/api/v1/control', {method: 'POST', headers: {'Content-Type': 'application/json'}, body})),
		await got(fetch(base + '/api/v1/control', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body})),
		await got(fetch(base + '/api/v1/nodes/node-01')),
	];
})(%q)`

// TestBrowser_AnotherOriginOrARebindingCannotDriveTheDashboard: in real
// Chromium, a page of another origin (another name and port) cannot run a
// control or read a node, and a page whose name rebinds to the dashboard's
// address (same-origin to itself, so the browser sends Host, Origin and
// Sec-Fetch-Site all of that name) gets 421 for the page, every read and
// every control. No pause is stored by either.
func TestBrowser_AnotherOriginOrARebindingCannotDriveTheDashboard(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{Run: cliRunner(env)})
	p := portOf(t, s.url)
	tab := rebindingBrowser(t)

	t.Run("AnotherOrigin", func(t *testing.T) {
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<!doctype html><title>another site</title><p>another site"))
		}))
		t.Cleanup(other.Close)
		page := "http://evil.example:" + strconv.Itoa(portOf(t, other.URL)) + "/"
		if err := chromedp.Do(tab, chromedp.Navigate(page)); err != nil {
			t.Fatalf("open %s: %v", page, err)
		}
		got := jsIn(t, tab, fmt.Sprintf(attack, s.url))
		t.Logf("from %s: %q", page, got)
		if got[0] != "failed: TypeError" {
			t.Errorf("a cross-origin JSON control: %s, want it refused by the browser (no CORS)", got[0])
		}
		if got[1] != "opaque" {
			t.Errorf("a cross-origin simple control: %s, want an opaque answer", got[1])
		}
		if got[2] != "failed: TypeError" {
			t.Errorf("a cross-origin read of a node: %s, want it unreadable", got[2])
		}
		if pauseStored(t, env) {
			t.Fatal("a page of another origin stored a pause")
		}
	})

	t.Run("Rebinding", func(t *testing.T) {
		page := "http://evil.example:" + strconv.Itoa(p) + "/"
		ctx, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(page))
		if err != nil {
			t.Fatalf("open %s: %v", page, err)
		}
		if resp.Status != http.StatusMisdirectedRequest {
			t.Errorf("the dashboard's page by a rebound name: %d, want 421", resp.Status)
		}
		got := jsIn(t, tab, fmt.Sprintf(attack, ""))
		t.Logf("from %s: %q", page, got)
		for i, what := range []string{"a same-origin JSON control", "a same-origin simple control", "a same-origin read of a node"} {
			if !strings.HasPrefix(got[i], "421 ") || !strings.Contains(got[i], `\"evil.example:`+strconv.Itoa(p)+`\"`) {
				t.Errorf("%s by a rebound name: %s, want 421 naming the Host", what, got[i])
			}
		}
		if pauseStored(t, env) {
			t.Fatal("a page of a rebound name stored a pause")
		}
	})

	// The same browser on the dashboard's own name runs the control: the
	// refusals above were for the name, not the browser.
	t.Run("OwnName", func(t *testing.T) {
		if err := chromedp.Do(tab, chromedp.Navigate(s.url+"/")); err != nil {
			t.Fatal(err)
		}
		got := jsIn(t, tab, fmt.Sprintf(attack, ""))
		if !strings.HasPrefix(got[0], "200 ") || !strings.Contains(got[0], `"ran": true`) || !pauseStored(t, env) {
			t.Errorf("a control from the dashboard's own page: %s; stored %v, want it run", got[0], pauseStored(t, env))
		}
	})
}

// TestBrowser_StorageTrouble_ShowsABanner: in real Chromium, the page shows
// a write JetStream refused for want of space as a banner naming it, and
// hides it once a write lands.
func TestBrowser_StorageTrouble_ShowsABanner(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	kv, err := env.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "tiny", MaxBytes: 1024, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	tiny := store.New(kv, func() *sluicev1.Event { return &sluicev1.Event{} })
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond, StoreEvery: 50 * time.Millisecond})
	tab := rebindingBrowser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(s.url+"/")); err != nil {
		t.Fatal(err)
	}
	banner := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // margin: a check every 50ms, an update every 50ms
		for {
			got := jsIn(t, tab, `(() => { const b = document.getElementById('storage'); return [String(b.hidden), b.textContent]; })()`)
			if (want == "" && got[0] == "true") || (want != "" && got[0] == "false" && strings.Contains(got[1], want)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the storage banner is hidden=%s %q", what, got[0], got[1])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	banner("before any refusal", "")
	if _, err := tiny.Create(ctx, "big", &sluicev1.Event{Reason: strings.Repeat("x", 4096)}); !errors.Is(err, store.ErrStorageFull) {
		t.Fatalf("a write past the bucket's max_bytes: %v, want store.ErrStorageFull", err)
	}
	banner("a refused write", "the bucket is at its size limit (JetStream error 10077")
	if _, err := tiny.Create(ctx, "small", &sluicev1.Event{Reason: "fits"}); err != nil {
		t.Fatal(err)
	}
	banner("a write that landed", "")
}
