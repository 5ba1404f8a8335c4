package agent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/services/agent"
)

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
	closed := testaddr.Held(t)

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

func TestCheckSpec_Validate_NamesTheCheckAndTheSetting(t *testing.T) {
	tests := []struct {
		name    string
		given   agent.CheckSpec
		wantErr string // "" = valid
	}{
		{name: "exec", given: agent.CheckSpec{Check: agent.ExecCheck{Command: "true"}, Retries: 2}},
		{name: "tcp", given: agent.CheckSpec{Check: agent.TCPCheck{Addr: "10.0.0.1:179"}}},
		{name: "tcp ipv6", given: agent.CheckSpec{Check: agent.TCPCheck{Addr: "[fd00::1]:179"}}},
		{name: "http", given: agent.CheckSpec{Check: agent.HTTPCheck{URL: "https://127.0.0.1:9100/healthz", ExpectStatus: 204}}},
		{name: "interface", given: agent.CheckSpec{Check: agent.InterfaceCheck{Interface: "vxlan100"}}},
		{name: "no check", given: agent.CheckSpec{}, wantErr: "no check"},
		{name: "negative timeout", given: agent.CheckSpec{Check: agent.ExecCheck{Label: "uplink", Command: "true"}, Timeout: -time.Second},
			wantErr: `check "uplink": timeout -1s is negative`},
		{name: "negative retries", given: agent.CheckSpec{Check: agent.ExecCheck{Label: "uplink", Command: "true"}, Retries: -1},
			wantErr: `check "uplink": retries -1 is negative`},
		{name: "empty command", given: agent.CheckSpec{Check: agent.ExecCheck{Label: "uplink", Command: " "}},
			wantErr: `check "uplink": exec command is empty`},
		{name: "tcp without port", given: agent.CheckSpec{Check: agent.TCPCheck{Addr: "10.0.0.1"}},
			wantErr: `check "tcp: 10.0.0.1": tcp address "10.0.0.1" is not host:port`},
		{name: "tcp without host", given: agent.CheckSpec{Check: agent.TCPCheck{Addr: ":179"}},
			wantErr: `tcp address ":179" is not host:port: host and port are both required`},
		{name: "http without scheme", given: agent.CheckSpec{Check: agent.HTTPCheck{URL: "127.0.0.1/healthz"}},
			wantErr: `check "http: 127.0.0.1/healthz": http url "127.0.0.1/healthz": want http://host/path`},
		{name: "http status out of range", given: agent.CheckSpec{Check: agent.HTTPCheck{URL: "http://h/", ExpectStatus: 999}},
			wantErr: "expected status 999 is not an HTTP status"},
		{name: "interface without name", given: agent.CheckSpec{Check: agent.InterfaceCheck{}}, wantErr: "interface name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.given.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestNew_RejectsAnInvalidCheck(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	_, err := agent.New(agent.Config{Conn: env.Conn, Node: "n1", Applier: &recorder{},
		Checks: []agent.CheckSpec{{Check: agent.ExecCheck{Command: "true"}}, {Check: agent.TCPCheck{Addr: "gw"}}}})
	if err == nil || !strings.Contains(err.Error(), `Checks[1]: check "tcp: gw": tcp address "gw" is not host:port`) {
		t.Fatalf("New() = %v, want the second check and its address named", err)
	}
}
