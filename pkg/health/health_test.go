package health

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHandler(t *testing.T) {
	var st State
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_test_gauge", Help: "a test gauge"})
	g.Set(3)
	reg.MustRegister(g)
	srv := httptest.NewServer(Handler(st.Get, reg))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name     string
		set      func()
		path     string
		wantCode int
		wantBody string
	}{
		{"liveness", func() {}, "/healthz", 200, "ok: running\n"},
		{"nothing said yet", func() {}, "/readyz", 503, "not ready: starting\n"},
		{"not ready, on one line", func() { st.Set(false, "cannot read the lease: a\nb") }, "/readyz", 503, "not ready: cannot read the lease: a b\n"},
		{"ready", func() { st.Set(true, "leading term 7") }, "/readyz", 200, "ready: leading term 7\n"},
		{"liveness whatever the readiness", func() { st.Set(false, "x") }, "/healthz", 200, "ok: running\n"},
		{"metrics from the registry", func() {}, "/metrics", 200, "sluice_test_gauge 3\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}
