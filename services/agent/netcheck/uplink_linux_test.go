package netcheck_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/agent/netcheck"
)

func TestUplink(t *testing.T) {
	tests := []struct {
		name     string
		given    func(t *testing.T, ns *testNS) // the links of the namespace
		iface    string
		wantKind error // nil = healthy
		wantErr  string
		wantOut  string
	}{
		{
			name:    "up with carrier",
			given:   func(t *testing.T, ns *testNS) { ns.addVeth(t, "up0", "up0p", ns); ns.up(t, "up0p"); ns.up(t, "up0") },
			iface:   "up0",
			wantOut: "uplink up0 (veth): up, carrier, operstate up",
		},
		{
			name:    "up with an operstate the driver does not track",
			iface:   "lo",
			wantOut: "uplink lo (device): up, carrier, operstate unknown",
		},
		{
			name:     "up, but the other end is down: no carrier",
			given:    func(t *testing.T, ns *testNS) { ns.addVeth(t, "nc0", "nc0p", ns); ns.up(t, "nc0") },
			iface:    "nc0",
			wantKind: netcheck.ErrNoCarrier,
			wantErr:  "uplink nc0 has no carrier (operstate ", // lower-layer-down once linkwatch ran
		},
		{
			name:     "administratively down",
			given:    func(t *testing.T, ns *testNS) { ns.addVeth(t, "dn0", "dn0p", ns); ns.up(t, "dn0p") },
			iface:    "dn0",
			wantKind: netcheck.ErrLinkDown,
			wantErr:  "uplink dn0 is administratively down",
		},
		{
			name:     "missing",
			iface:    "eth9",
			wantKind: netcheck.ErrLinkMissing,
			wantErr:  "uplink eth9 does not exist",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNS(t, "uplink")
			if tt.given != nil {
				tt.given(t, ns)
			}
			c := netcheck.Uplink{Interface: tt.iface}
			if tt.wantKind != nil {
				out, err := runCheck(t, ns, c, nil, time.Second)
				wantResult(t, out, err, tt.wantKind, tt.wantErr)
				return
			}
			// The kernel sets a link's operstate a moment after its
			// carrier (linkwatch), so a link just brought up may take a
			// few runs to pass, as the agent's retries would give it.
			deadline := time.Now().Add(5 * time.Second)
			for {
				out, err := runCheck(t, ns, c, nil, time.Second)
				if err == nil || time.Now().After(deadline) {
					wantResult(t, out, err, nil, "", tt.wantOut)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func TestUplink_Name(t *testing.T) {
	if got := (netcheck.Uplink{Interface: "eth0"}).Name(); got != "uplink: eth0" {
		t.Errorf("Name() = %q, want %q", got, "uplink: eth0")
	}
	if got := (netcheck.Uplink{Label: "fabric", Interface: "eth0"}).Name(); got != "fabric" {
		t.Errorf("Name() = %q, want the label", got)
	}
}
