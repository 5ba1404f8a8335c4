package main

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// --applier netlink,frr is one applier of two parts, netlink first; the
// frr section and the --frr-* flags make its settings, the VRF and table
// rule coming from the netlink settings; the FRR checks target
// --frr-pathspace.
func TestAgentConfig_NetlinkAndFRR_FromFileAndFlags(t *testing.T) {
	frrtest.Require(t)
	conf := writeFile(t, "agent.yaml", `netlink: {uplink: lo, vrfs: "off", vrfTableBase: 5000}
frr:
  asn: 65001
  routerId: 192.0.2.1
  neighbors: [{address: 192.0.2.254, remoteAS: external, connectRetry: 1}]
  pathspace: from-file
checkTimeout: 3s
checks:
- {name: sessions, bgp: {minPrefixes: 1}}
- {route: 198.51.100.0/24}
`)
	cfg, err := agentConfigOf(t, "--config", conf, "--applier", "netlink,frr", "--frr-asn", "65002",
		"--frr-neighbor", "192.0.2.1=65001", "--frr-neighbor", "eth1=internal", "--frr-pathspace", "no-such-ps",
		"--check-bgp-min-prefixes", "2", "--check-route", "203.0.113.0/24%vrf-red")
	if err != nil {
		t.Fatal(err)
	}
	parts, ok := cfg.Applier.(agent.Appliers)
	if !ok || len(parts) != 2 || parts[0].Name != "netlink" || parts[1].Name != "frr" {
		t.Fatalf("applier = %#v, want agent.Appliers{netlink, frr}", cfg.Applier)
	}
	if _, ok := parts[0].Applier.(*hostnet.Applier); !ok {
		t.Errorf("first part is %T, want *hostnet.Applier", parts[0].Applier)
	}
	fa, ok := parts[1].Applier.(*frr.Applier)
	if !ok {
		t.Fatalf("second part is %T, want *frr.Applier", parts[1].Applier)
	}
	inst := frr.Instance{Pathspace: "no-such-ps"}
	if fa.Instance() != inst {
		t.Errorf("FRR instance %v, want the flag's %v", fa.Instance(), inst)
	}
	// The settings show in the file: ASN from the flag, the neighbours
	// replaced by the flags', flat layout (netlink's vrfs: off).
	file, err := fa.File(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"router bgp 65002\n", " neighbor eth1 interface remote-as internal\n", " neighbor 192.0.2.1 remote-as 65001\n", "route-map sluice_import_v4 deny 65535"} {
		if !strings.Contains(file, want) {
			t.Errorf("file lacks %q:\n%s", want, file)
		}
	}
	if strings.Contains(file, "192.0.2.254") {
		t.Errorf("file has the file's neighbour, which the flags replace:\n%s", file)
	}
	want := []agent.CheckSpec{
		{Check: frr.BGP{Label: "sessions", FRR: inst, MinPrefixes: 1}, Timeout: 3 * time.Second},
		{Check: frr.Route{FRR: inst, Prefix: netip.MustParsePrefix("198.51.100.0/24")}, Timeout: 3 * time.Second},
		{Check: frr.BGP{FRR: inst, MinPrefixes: 2}, Timeout: 3 * time.Second},
		{Check: frr.Route{FRR: inst, Prefix: netip.MustParsePrefix("203.0.113.0/24"), VRF: "vrf-red"}, Timeout: 3 * time.Second},
	}
	if !reflect.DeepEqual(cfg.Checks, want) {
		t.Errorf("checks =\n%#v\nwant\n%#v", cfg.Checks, want)
	}
}

// What is wrong at start is refused at start, naming the flag or field and
// the file; a pathspace no daemon runs in is a warning.
func TestAgentConfig_FRR_RefusedAtStart(t *testing.T) {
	frrtest.Require(t)
	flags := []string{"--applier", "frr", "--vrfs", "off", "--frr-asn", "65001", "--frr-router-id", "192.0.2.1"}
	refusedBase := writeFile(t, "base.conf", "hostname x\nrouter bgp 65001 vrf mgmt\n neighbor 198.51.100.1 remote-ass external\nexit\n")
	ps := "sluice-cmd-test-" + strings.ReplaceAll(t.Name(), "/", "-")
	own := filepath.Join(frr.ConfDir, ps, "frr.conf")
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no ASN", []string{"--applier", "frr", "--frr-router-id", "192.0.2.1"}, "frr settings (the --config file's frr section and the --frr-* flags): invalid FRR settings: asn: is required"},
		{"a bad neighbour", append(flags, "--frr-neighbor", "192.0.2.9"), `--frr-neighbor "192.0.2.9": want ADDR=REMOTEAS`},
		{"frr,netlink", []string{"--applier", "frr,netlink"}, "write netlink,frr"},
		{"vrfs in frr with both appliers", []string{"--applier", "netlink,frr", "--uplink", "lo", "--vrfs", "off", "--config",
			writeFile(t, "a.yaml", "frr: {asn: 65001, routerId: 192.0.2.1, vrfs: \"off\"}\n")}, "frr.vrfs: with --applier netlink,frr it is the netlink settings'"},
		{"the pathspace's own frr.conf as the base", append(flags, "--frr-pathspace", ps, "--frr-base", own), "is FRR pathspace \"" + ps + "\"'s own frr.conf (" + own + "), which frr-reload overwrites"},
		{"a base FRR refuses", append(flags, "--frr-base", refusedBase), "base file " + refusedBase + " with sluice's block of an empty config: FRR refused it (vtysh -C): line 3 (base file): % Unknown command: neighbor 198.51.100.1 remote-ass external"},
		{"a base that defines what sluice renders", append(flags, "--frr-base", writeFile(t, "b.conf", "route-map sluice_x permit 10\nexit\n")), "base line 1 \"route-map sluice_x permit 10\""},
		{"a missing base", append(flags, "--frr-base", "/nonexistent/base.conf"), "--frr-base (frr.base): open /nonexistent/base.conf"},
		{"a route check without a prefix length", []string{"--check-route", "10.0.0.1"}, "--check-route 10.0.0.1: route \"10.0.0.1\": want PREFIX[%VRF]"},
		{"a config route check with host bits", []string{"--config", writeFile(t, "c.yaml", "checks:\n- {route: 10.0.0.1/8}\n")}, "checks[0]: route: route 10.0.0.1/8 has host bits set: write 10.0.0.0/8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agentConfigOf(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v\nwant it to contain %q", err, tt.wantErr)
			}
		})
	}

	t.Run("FRR not installed", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := agentConfigOf(t, flags...)
		if !errors.Is(err, frr.ErrNotInstalled) || !strings.Contains(err.Error(), "no vtysh on the agent's PATH") {
			t.Errorf("err = %v, want ErrNotInstalled naming vtysh", err)
		}
	})
	t.Run("a pathspace no daemon runs in is a warning", func(t *testing.T) {
		var o options
		fs := o.flagSet(nil)
		if err := fs.Parse(append([]string{"--node", "n1", "--state-dir", t.TempDir(), "--frr-pathspace", ps}, flags...)); err != nil {
			t.Fatal(err)
		}
		if _, err := o.agentConfig(fs); err != nil {
			t.Fatal(err)
		}
		want := "FRR pathspace \"" + ps + "\": FRR is not running: its socket directory " + filepath.Join(frr.RunDir, ps) + " does not exist (are FRR's daemons started with -N " + ps + "?); every apply fails until it does"
		if !reflect.DeepEqual(o.warnings, []string{want}) {
			t.Errorf("warnings %q, want %q", o.warnings, want)
		}
	})
}
