package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
)

// withHost sends a request naming host in its Host header.
func (s served) withHost(t *testing.T, method, path, host, body string, headers map[string]string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	// A stream that is served does not end: the timeout says so.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, b.Bytes()
}

// TestHost_OnlyItsOwnNames_RefusedBeforeAnyHandler: a request whose Host
// header is not one of the dashboard's names (its address and port,
// localhost and the loopback literals with its port, --allowed-host) is
// refused with 421 and a JSON error naming the Host and the flag, whatever
// it asks for (the page, the API, the stream, a control, the login), and
// nothing is run: no pause is stored. What a browser sends after a DNS
// rebinding (Host, Origin and Sec-Fetch-Site all of evil.example) is such
// a request.
func TestHost_OnlyItsOwnNames_RefusedBeforeAnyHandler(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	var logMu sync.Mutex
	var logged []string
	s := serve(t, env, dashboard.Options{Run: cliRunner(env), AllowedHosts: []string{"proxy.example.com", "dash.example.com:443"},
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		}})
	p := portOf(t, s.url)
	hp := func(name string, port int) string { return net.JoinHostPort(name, strconv.Itoa(port)) }

	requests := []struct {
		method, path, body string
	}{
		{"GET", "/", ""},
		{"GET", "/app.js", ""},
		{"GET", "/api/v1/config", ""},
		{"GET", "/api/v1/fleet", ""},
		{"GET", "/api/v1/nodes/node-01", ""},
		{"GET", "/api/v1/rollouts", ""},
		{"GET", "/api/v1/stream", ""},
		{"POST", "/api/v1/control", `{"action":"pause","reason":"rebound","confirm":true}`},
		{"POST", "/api/v1/control", `{"action":"abort","rollout":"1-rev1","confirm":true}`},
		{"POST", "/api/v1/control", `{"action":"undo","confirm":true}`},
		{"POST", "/api/v1/login", `{"token":"x"}`},
	}
	for _, c := range []struct {
		name, host string
	}{
		{"a rebound name with the dashboard's port", hp("evil.example", p)},
		{"a rebound name on port 80", "evil.example"},
		{"a name that only starts like localhost", hp("localhost.evil.example", p)},
		{"a name that only starts like the loopback literal", hp("127.0.0.1.nip.io", p)},
		{"localhost with another port", hp("localhost", p+1)},
		{"127.0.0.1 with another port", hp("127.0.0.1", 1)},
		{"[::1] with another port", hp("::1", 1)},
		{"an allowed name with another port than allowed", "dash.example.com:8443"},
		{"an allowed name's subdomain", "x.proxy.example.com"},
	} {
		t.Run("refused/"+c.name, func(t *testing.T) {
			for _, r := range requests {
				origin := "http://" + c.host
				code, body := s.withHost(t, r.method, r.path, c.host, r.body, map[string]string{
					"Content-Type": "application/json", "Origin": origin, "Sec-Fetch-Site": "same-origin"})
				var e struct{ Error, Field string }
				if code != http.StatusMisdirectedRequest || json.Unmarshal(body, &e) != nil || e.Field != "Host" ||
					!strings.Contains(e.Error, strconv.Quote(c.host)) || !strings.Contains(e.Error, "--allowed-host") {
					t.Errorf("%s %s with Host %s: %d %s; want 421, a JSON error naming the Host and --allowed-host", r.method, r.path, c.host, code, body)
				}
			}
		})
	}
	if pauseStored(t, env) {
		t.Fatal("a request with a Host the dashboard does not serve stored a pause")
	}
	if ran := s.ran.all(); len(ran) != 0 {
		t.Fatalf("ran %v", ran)
	}
	// Each refused Host is logged once, for an operator whose proxy is
	// not yet allowed.
	logMu.Lock()
	refusals := 0
	for _, l := range logged {
		if strings.Contains(l, "(421)") && strings.Contains(l, "--allowed-host") {
			refusals++
		}
	}
	logMu.Unlock()
	if refusals != 9 {
		t.Errorf("%d refusals logged, want one for each of the 9 Hosts: %q", refusals, logged)
	}

	for _, host := range []string{
		hp("127.0.0.1", p), hp("localhost", p), hp("LocalHost", p), hp("::1", p), hp("127.0.0.2", p),
		"proxy.example.com", "proxy.example.com:8443", "dash.example.com:443",
	} {
		t.Run("served/"+host, func(t *testing.T) {
			for _, r := range requests {
				if r.path == "/api/v1/stream" || r.method != "GET" {
					continue // a stream does not end; the controls are below
				}
				if code, body := s.withHost(t, r.method, r.path, host, "", nil); code != 200 {
					t.Errorf("GET %s with Host %s: %d %s, want 200", r.path, host, code, body)
				}
			}
			// A control's preview from the dashboard's own page of that name.
			code, body := s.withHost(t, "POST", "/api/v1/control", host, `{"action":"pause"}`, map[string]string{
				"Content-Type": "application/json", "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"})
			if code != 200 || !strings.Contains(string(body), `"command": "sluice pause"`) {
				t.Errorf("preview of pause with Host %s: %d %s, want 200", host, code, body)
			}
		})
	}
	if pauseStored(t, env) {
		t.Fatal("a preview stored a pause")
	}
	// The same control, confirmed, from the dashboard's own page: it runs
	// and stores the pause (what the refusals above did not).
	code, body := s.withHost(t, "POST", "/api/v1/control", hp("localhost", p), `{"action":"pause","reason":"ours","confirm":true}`, map[string]string{
		"Content-Type": "application/json", "Origin": "http://" + hp("localhost", p), "Sec-Fetch-Site": "same-origin"})
	if code != 200 || !pauseStored(t, env) {
		t.Fatalf("a confirmed pause from the dashboard's own page: %d %s; stored %v", code, body, pauseStored(t, env))
	}
}

// TestOrigin_StateChangesOnlyFromItsOwnNames: a control or a login whose
// Origin is not a page of one of the dashboard's names is refused (403)
// and runs nothing, even when its Host is the dashboard's own; the Origin
// is checked against the dashboard's names, not against the request's
// Host, so a proxy that rewrites Host still works for its allowed name.
func TestOrigin_StateChangesOnlyFromItsOwnNames(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := serve(t, env, dashboard.Options{Run: cliRunner(env), AllowedHosts: []string{"proxy.example.com"}})
	p := portOf(t, s.url)
	own := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	for _, c := range []struct {
		name, origin string
		want         int
	}{
		{"another site", "http://evil.example", 403},
		{"a rebound name with the dashboard's port", "http://evil.example:" + strconv.Itoa(p), 403},
		{"another port of loopback", "http://127.0.0.1:" + strconv.Itoa(p+1), 403},
		{"localhost with another port", "http://localhost:" + strconv.Itoa(p+1), 403},
		{"an opaque origin (sandboxed frame, file:)", "null", 403},
		{"a scheme that is not a web page's", "chrome-extension://" + own, 403},
		{"an allowed name's subdomain", "https://x.proxy.example.com", 403},
		{"its own page", "http://" + own, 200},
		{"its own page by localhost", "http://localhost:" + strconv.Itoa(p), 200},
		{"a proxy's page, the proxy rewriting Host", "https://proxy.example.com", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := s.withHost(t, "POST", "/api/v1/control", own, `{"action":"pause","reason":"x","confirm":true}`,
				map[string]string{"Content-Type": "application/json", "Origin": c.origin})
			if code != c.want {
				t.Errorf("a control with Origin %s: %d %s, want %d", c.origin, code, body, c.want)
			}
			if c.want == 403 && (!strings.Contains(string(body), `"field": "Origin"`) || pauseStored(t, env)) {
				t.Errorf("a refused control: %s; want an error about the Origin, and no pause stored (stored %v)", body, pauseStored(t, env))
			}
			code, body = s.withHost(t, "POST", "/api/v1/login", own, `{"token":"x"}`, map[string]string{"Content-Type": "application/json", "Origin": c.origin})
			if code != c.want {
				t.Errorf("a login with Origin %s: %d %s, want %d", c.origin, code, body, c.want)
			}
			if c.want == 200 {
				_ = env.Buckets.Control.Purge(context.Background(), contract.KeyPause)
			}
		})
	}
}

func TestAllowedHosts_BadValues_NameTheFlag(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	for _, v := range []string{"", "http://dash.example.com", "dash.example.com/", "*.example.com", "dash.example.com:http", "dash.example.com:70000", "fd00::1:3100:x:y:z"} {
		_, err := dashboard.New(dashboard.Options{JS: env.JS, AllowedHosts: []string{v}, AllowedHostFlag: "--dashboard-allowed-host"})
		if err == nil || !strings.HasPrefix(err.Error(), "--dashboard-allowed-host") {
			t.Errorf("--dashboard-allowed-host %q: %v, want an error naming the flag", v, err)
		}
	}
	for _, v := range []string{"dash.example.com", "dash.example.com:443", "10.0.0.5:3100", "[fd00::1]:3100", "fd00::1"} {
		if _, err := dashboard.New(dashboard.Options{JS: env.JS, AllowedHosts: []string{v}}); err != nil {
			t.Errorf("--allowed-host %q: %v", v, err)
		}
	}
}
