package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

func TestAgentConfig_NetworkChecksFromFileAndFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.yaml")
	body := "checkTimeout: 4s\nchecks:\n- {uplink: eth0}\n- {name: gw, gateway: {targets: {100: [10.100.0.12]}}, retries: 3}\n- {peer: 'tcp://10.0.0.5:179', vrf: red}\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := agentConfigOf(t, "--config", p, "--check-uplink", "eth1", "--check-peer", "10.0.0.6%blue")
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.CheckSpec{
		{Check: netcheck.Uplink{Interface: "eth0"}, Timeout: 4 * time.Second},
		{Check: netcheck.Gateway{Label: "gw", Targets: map[uint32][]netip.Addr{100: {netip.MustParseAddr("10.100.0.12")}}}, Timeout: 4 * time.Second, Retries: 3},
		{Check: netcheck.Peer{TCP: netip.MustParseAddrPort("10.0.0.5:179"), VRF: "red"}, Timeout: 4 * time.Second},
		{Check: netcheck.Uplink{Interface: "eth1"}, Timeout: 4 * time.Second},
		{Check: netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.6"), VRF: "blue"}, Timeout: 4 * time.Second},
	}
	if !reflect.DeepEqual(cfg.Checks, want) {
		t.Errorf("checks =\n%#v\nwant\n%#v", cfg.Checks, want)
	}
	for given, wantErr := range map[string]string{
		"checks:\n- {uplink: eth0, exec: 'true'}\n":          "checks[0]: set exactly one of exec, tcp, http, interface, gateway, peer, uplink",
		"checks:\n- {name: x, peer: spine1}\n":               `checks[0]: check "x": peer: "spine1": want an IP address`,
		"checks:\n- {gateway: {targets: {0: [10.0.0.1]}}}\n": `checks[0]: gateway.targets: vlan "0" is not a number 1-4094`,
		"checks:\n- {tcp: 'a:1', vrf: red}\n":                "checks[0]: vrf: only for a peer check",
		"checks:\n- {gateway: {tragets: {}}}\n":              "unknown field",
	} {
		if err := os.WriteFile(p, []byte(given), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := agentConfigOf(t, "--config", p)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: err = %v, want %q", given, err, wantErr)
		}
	}
	if _, err := agentConfigOf(t, "--check-gateway-target", "x=1"); err == nil || !strings.Contains(err.Error(), `--check-gateway-target x=1: vlan "x" is not a number 1-4094`) {
		t.Errorf("err = %v", err)
	}
}
