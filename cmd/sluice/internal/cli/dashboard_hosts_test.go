package cli

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
)

// TestDashboard_AllowedHostFlag: `sluice dashboard --allowed-host`, repeated
// and as a comma list, adds the names the dashboard answers to; any other
// Host gets 421 naming the flag. A bad value is refused before anything
// starts, by `sluice dashboard` and `sluice dev` each with its own flag's
// name.
func TestDashboard_AllowedHostFlag(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--server", env.URL, "dashboard", "--addr", "127.0.0.1:0",
			"--allowed-host", "proxy.example.com,pinned.example.com:443", "--allowed-host", "other.example.com"}, Streams{Out: &out, Err: &out}, "test")
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("sluice dashboard exited %d: %s", code, out.String())
		}
	})
	urlRE := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/`)
	natstest.Eventually(t, 10*time.Second, "sluice dashboard to print its URL", func() bool { return urlRE.MatchString(out.String()) })
	url := urlRE.FindString(out.String())
	get := func(host string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url+"api/v1/config", nil)
		req.Host = host
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	own := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	for _, host := range []string{own, "proxy.example.com", "proxy.example.com:8443", "pinned.example.com:443", "other.example.com"} {
		if code, body := get(host); code != 200 {
			t.Errorf("Host %s: %d %s, want 200", host, code, body)
		}
	}
	for _, host := range []string{"evil.example:" + strings.Split(own, ":")[1], "pinned.example.com:8443"} {
		if code, body := get(host); code != http.StatusMisdirectedRequest || !strings.Contains(body, "--allowed-host") {
			t.Errorf("Host %s: %d %s, want 421 naming --allowed-host", host, code, body)
		}
	}

	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"dashboard", "--addr", "127.0.0.1:0", "--allowed-host", "https://dash.example.com"}, "--allowed-host"},
		{[]string{"dev", "--data", t.TempDir(), "--dashboard-allowed-host", "https://dash.example.com"}, "--dashboard-allowed-host"},
	} {
		code, _, stderr := sluice(t, env.URL, c.args...)
		if code != ExitUsage || !strings.Contains(stderr, c.flag+` "https://dash.example.com"`) {
			t.Errorf("sluice %s: exit %d: %s; want %d naming %s", strings.Join(c.args, " "), code, stderr, ExitUsage, c.flag)
		}
	}
}
