package agent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/services/agent"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestChecks(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			http.Error(w, "bgp session idle", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	closed := closedPort(t)

	tests := []struct {
		name       string
		given      agent.Check
		wantName   string
		wantErr    bool
		wantOutput string
	}{
		{name: "tcp to a listener", given: agent.TCPCheck{Addr: l.Addr().String()}, wantName: "tcp: " + l.Addr().String(), wantOutput: "connected"},
		{name: "tcp to a closed port", given: agent.TCPCheck{Addr: closed}, wantErr: true, wantOutput: "refused"},
		{name: "tcp refused counts as reachable", given: agent.TCPCheck{Label: "gw", Addr: closed, RefusedIsReachable: true}, wantName: "gw", wantOutput: "reachable"},
		{name: "http 200", given: agent.HTTPCheck{URL: srv.URL}, wantName: "http: " + srv.URL, wantOutput: "200 OK"},
		{name: "http unexpected status", given: agent.HTTPCheck{URL: srv.URL + "/down"}, wantErr: true, wantOutput: "bgp session idle"},
		{name: "http expected non-200 status", given: agent.HTTPCheck{URL: srv.URL + "/down", ExpectStatus: 503}, wantOutput: "503"},
		{name: "loopback interface is up", given: agent.InterfaceCheck{Interface: "lo"}, wantName: "interface: lo", wantOutput: "up"},
		{name: "missing interface", given: agent.InterfaceCheck{Interface: "sluice-none0"}, wantErr: true, wantOutput: "sluice-none0"},
		{name: "exec exit 0", given: agent.ExecCheck{Command: "echo fine"}, wantName: "exec: echo fine", wantOutput: "fine"},
		{name: "exec non-zero", given: agent.ExecCheck{Command: "echo broken >&2; exit 2"}, wantErr: true, wantOutput: "broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.given.Run(context.Background(), agent.CheckEnv{Node: "n1"})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v (output %q)", err, tt.wantErr, out)
			}
			if !strings.Contains(out, tt.wantOutput) {
				t.Errorf("output %q does not contain %q", out, tt.wantOutput)
			}
			if tt.wantName != "" && tt.given.Name() != tt.wantName {
				t.Errorf("name %q, want %q", tt.given.Name(), tt.wantName)
			}
		})
	}
}
