package frr_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// n1 announces two prefixes (static routes to Null0, redistributed) to n2
// over eBGP on the fabric.
const (
	n1Config = `router bgp 65001
 bgp router-id 192.0.2.1
 no bgp ebgp-requires-policy
 neighbor 192.0.2.2 remote-as 65002
 neighbor 192.0.2.2 timers connect 1
 !
 address-family ipv4 unicast
  redistribute static
 exit-address-family
exit
!
ip route 203.0.113.0/24 Null0
ip route 198.51.100.0/24 Null0
`
	n2Config = `router bgp 65002
 bgp router-id 192.0.2.2
 no bgp ebgp-requires-policy
 neighbor 192.0.2.1 remote-as 65001
 neighbor 192.0.2.1 timers connect 1
exit
`
	// n2Filtered is n2Config with an inbound route map that drops
	// 203.0.113.0/24: the change that must fail a route check.
	n2Filtered = `ip prefix-list from-n1 seq 5 deny 203.0.113.0/24
ip prefix-list from-n1 seq 10 permit 0.0.0.0/0 le 32
!
route-map from-n1 permit 10
 match ip address prefix-list from-n1
exit
!
router bgp 65002
 bgp router-id 192.0.2.2
 no bgp ebgp-requires-policy
 neighbor 192.0.2.1 remote-as 65001
 neighbor 192.0.2.1 timers connect 1
 !
 address-family ipv4 unicast
  neighbor 192.0.2.1 route-map from-n1 in
 exit-address-family
exit
`
)

// confFile writes an frr.conf with the host's name (the daemons' own: see
// Reload) into a temporary file.
func confFile(t *testing.T, body string) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "frr.conf")
	if err := os.WriteFile(p, []byte("frr defaults traditional\nhostname "+host+"\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runCheck runs c as the agent would, bounded by timeout, in the network
// namespace ns (where its kernel lookups go; netns.None() = the test's), and says how long it took.
func runCheck(t *testing.T, ns netns.NsHandle, c agent.Check, timeout time.Duration) (string, error, time.Duration) {
	t.Helper()
	var out string
	var cerr error
	start := time.Now()
	run := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out, cerr = c.Run(ctx, agent.CheckEnv{})
		return nil
	}
	var err error
	if ns.IsOpen() {
		err = hostnettest.RunIn(ns, run)
	} else {
		err = run() // the test's own namespace
	}
	if err != nil {
		t.Fatalf("run %s in its namespace: %v", c.Name(), err)
	}
	return out, cerr, time.Since(start)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestFRR_TwoPeers_ChecksFollowSessionsRoutesAndReloads runs two FRR
// instances with eBGP between them and walks the life of a node's routing
// config: the checks pass once the session is up and the prefixes are in
// FRR and the kernel; the same config again reloads nothing; a config FRR
// refuses changes nothing; a route map that drops a prefix fails the
// route check naming it, and the old config brings it back; a hung or a
// stopped bgpd fails the BGP check saying so, within its timeout.
func TestFRR_TwoPeers_ChecksFollowSessionsRoutesAndReloads(t *testing.T) {
	frrtest.Require(t)
	hostnettest.RequireNetAdmin(t)
	fab := hostnettest.NewFabric(t, 2)
	n1 := frrtest.Start(t, fab.Nodes[0].Name, frrtest.Options{Config: n1Config})
	n2 := frrtest.Start(t, fab.Nodes[1].Name, frrtest.Options{Config: n2Config})
	ns2 := fab.Nodes[1].NS

	kept, dropped := "198.51.100.0/24", "203.0.113.0/24"
	routeCheck := func(p string) frr.Route {
		c, err := frr.ParseRoute(p, n2.Instance)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("bgp check passes once established with both prefixes", func(t *testing.T) {
		out, err, took := runCheck(t, ns2, frr.BGP{FRR: n2.Instance, MinPrefixes: 2}, 20*time.Second)
		if err != nil {
			t.Fatalf("bgp check: %v\n%s", err, out)
		}
		t.Logf("bgp check passed %s after n1 started (check took %s):\n%s", time.Since(n1.Started).Round(time.Millisecond), took.Round(time.Millisecond), out)
		if !strings.Contains(out, "vrf default: 192.0.2.1 (AS 65001) Established, 2 prefixes received") {
			t.Errorf("output does not show the neighbour with its prefixes:\n%s", out)
		}
		out, err, _ = runCheck(t, ns2, frr.BGP{FRR: n2.Instance, MinPrefixes: 3}, 2*time.Second)
		if !errors.Is(err, frr.ErrFewPrefixes) || !strings.Contains(err.Error(), "sent 2 prefixes, want at least 3") {
			t.Errorf("min 3 prefixes: err = %v, want ErrFewPrefixes naming the counts\n%s", err, out)
		}
	})

	t.Run("route check sees the prefix in FRR and the kernel", func(t *testing.T) {
		for _, p := range []string{kept, dropped} {
			out, err, took := runCheck(t, ns2, routeCheck(p), 10*time.Second)
			if err != nil {
				t.Fatalf("route %s: %v\n%s", p, err, out)
			}
			t.Logf("route %s checked in %s:\n%s", p, took.Round(time.Millisecond), out)
			for _, want := range []string{"FRR: " + p + " bgp selected installed (vrf default, table 254", "kernel main table: " + p + " via 192.0.2.1 dev uplink proto bgp"} {
				if !strings.Contains(out, want) {
					t.Errorf("route %s: output lacks %q:\n%s", p, want, out)
				}
			}
		}
		// The prefix is in FRR on n1 (static) but the check looks in the
		// kernel of the namespace it runs in: n2's has it, the host's not.
		out, err, _ := runCheck(t, netns.None(), routeCheck(dropped), time.Second)
		if !errors.Is(err, frr.ErrNotInKernel) {
			t.Errorf("route check in the host's namespace: err = %v, want ErrNotInKernel\n%s", err, out)
		}
	})

	t.Run("the same config again reloads nothing", func(t *testing.T) {
		// The first reload after a boot may differ from the booted file:
		// a line the file leaves to FRR's default ("ipv6 forwarding")
		// shows in the running config as the kernel had it.
		f := confFile(t, n2Config)
		start := time.Now()
		if _, err := n2.Reload(ctxT(t, 10*time.Second), f); err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		start = time.Now()
		d, err := n2.Diff(ctxT(t, 10*time.Second), f)
		if err != nil {
			t.Fatal(err)
		}
		diffTook := time.Since(start)
		if !d.Empty() {
			t.Fatalf("the reloaded config differs from itself:\n%s", d)
		}
		start = time.Now()
		if _, err := n2.Reload(ctxT(t, 10*time.Second), f); err != nil {
			t.Fatal(err)
		}
		t.Logf("reload after boot %s; then diff %s (%s), reload of the same file %s", first.Round(time.Millisecond), diffTook.Round(time.Millisecond), d, time.Since(start).Round(time.Millisecond))
	})

	t.Run("a config FRR refuses leaves the running config unchanged", func(t *testing.T) {
		before, err := n2.RunningConfig(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		badLine := " neighbor 192.0.2.1 route-map from-n1 sideways"
		bad := confFile(t, strings.Replace(n2Filtered, " neighbor 192.0.2.1 timers connect 1\n", " neighbor 192.0.2.1 timers connect 1\n"+badLine+"\n", 1))
		_, err = n2.Reload(ctxT(t, 10*time.Second), bad)
		want := fmt.Sprintf("line %d: %% Unknown command:%s", lineOf(t, bad, badLine), badLine)
		if !errors.Is(err, frr.ErrRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("reload of a refused config: err = %v, want ErrRefused quoting FRR: %q", err, want)
		}
		t.Logf("refused: %v", err)
		if _, err := n2.Diff(ctxT(t, 10*time.Second), bad); !errors.Is(err, frr.ErrRefused) {
			t.Errorf("diff of a refused config: err = %v, want ErrRefused", err)
		}
		after, err := n2.RunningConfig(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Errorf("running config changed by a refused reload:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("a route map dropping a prefix fails its route check, the old config restores it", func(t *testing.T) {
		filtered := confFile(t, n2Filtered)
		d, err := n2.Diff(ctxT(t, 10*time.Second), filtered)
		if err != nil {
			t.Fatal(err)
		}
		if d.Empty() || !strings.Contains(d.String(), "neighbor 192.0.2.1 route-map from-n1 in") {
			t.Errorf("diff does not add the route map:\n%s", d)
		}
		start := time.Now()
		log, err := n2.Reload(ctxT(t, 10*time.Second), filtered)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reload with the route map took %s; diff was:\n%s\nfrr-reload:\n%s", time.Since(start).Round(time.Millisecond), d, clipLog(log))
		if d, err := n2.Diff(ctxT(t, 10*time.Second), filtered); err != nil || !d.Empty() {
			t.Errorf("after the reload, diff = %s, %v; want no change", d, err)
		}
		// frr-reload saved what it applied as the instance's boot config.
		if saved, err := os.ReadFile(n2.ConfigFile()); err != nil || !strings.Contains(string(saved), "neighbor 192.0.2.1 route-map from-n1 in") {
			t.Errorf("%s after the reload: %v\n%s", n2.ConfigFile(), err, saved)
		}

		gone := waitRIB(t, n2, dropped, false)
		out, err, took := runCheck(t, ns2, routeCheck(dropped), 3*time.Second)
		if !errors.Is(err, frr.ErrRouteMissing) {
			t.Fatalf("route %s after the route map: err = %v, want ErrRouteMissing\n%s", dropped, err, out)
		}
		if !strings.Contains(out, dropped+" is not in FRR's routing table of vrf default") || !strings.Contains(out, dropped+" is not in the kernel's main table") {
			t.Errorf("output does not say where %s is missing:\n%s", dropped, out)
		}
		t.Logf("%s left n2's RIB %s after the reload; the route check failed as it should at its timeout (%s): %v\n%s", dropped, gone, took.Round(time.Millisecond), err, out)
		if out, err, _ := runCheck(t, ns2, routeCheck(kept), 5*time.Second); err != nil {
			t.Errorf("route %s, which the route map permits: %v\n%s", kept, err, out)
		}

		start = time.Now()
		if _, err := n2.Reload(ctxT(t, 10*time.Second), confFile(t, n2Config)); err != nil {
			t.Fatal(err)
		}
		reload := time.Since(start)
		back := waitRIB(t, n2, dropped, true)
		out, err, took = runCheck(t, ns2, routeCheck(dropped), 10*time.Second)
		if err != nil {
			t.Fatalf("route %s after restoring the config: %v\n%s", dropped, err, out)
		}
		t.Logf("restore: reload %s, %s back in n2's RIB %s later, route check passed in %s", reload.Round(time.Millisecond), dropped, back, took.Round(time.Millisecond))
	})

	t.Run("a hung bgpd fails the bgp check at its timeout", func(t *testing.T) {
		if err := n2.Signal("bgpd", syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		out, err, took := runCheck(t, ns2, frr.BGP{FRR: n2.Instance}, time.Second)
		if err := n2.Signal("bgpd", syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, frr.ErrNoAnswer) || took > 3*time.Second {
			t.Errorf("bgp check of a stopped bgpd: err = %v after %s; want ErrNoAnswer within about 1s\n%s", err, took, out)
		}
		t.Logf("hung bgpd: check failed after %s: %v", took.Round(time.Millisecond), err)
	})

	t.Run("a stopped bgpd fails the bgp check saying FRR is unreachable", func(t *testing.T) {
		if err := n2.StopDaemon("bgpd"); err != nil {
			t.Fatal(err)
		}
		out, err, took := runCheck(t, ns2, frr.BGP{FRR: n2.Instance}, 10*time.Second)
		if !errors.Is(err, frr.ErrNotRunning) || !strings.Contains(err.Error(), "FRR is unreachable") {
			t.Fatalf("bgp check without bgpd: err = %v, want ErrNotRunning saying FRR is unreachable\n%s", err, out)
		}
		if want := "bgpd does not answer at " + filepath.Join(n2.SocketDir(), "bgpd.vty"); !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
		if took > 2*time.Second {
			t.Errorf("bgp check without bgpd took %s: it must not wait for its timeout", took)
		}
		t.Logf("stopped bgpd: check failed after %s:\n%s", took.Round(time.Millisecond), out)
	})
}

// lineOf is the number of the line of file that is line.
func lineOf(t *testing.T, file, line string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if l == line {
			return i + 1
		}
	}
	t.Fatalf("%s has no line %q", file, line)
	return 0
}

// waitRIB polls in's RIB until prefix is there (present) or not, and
// returns how long that took.
func waitRIB(t *testing.T, in *frrtest.Instance, prefix string, present bool) time.Duration {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	start := time.Now()
	for time.Since(start) < 10*time.Second {
		rib, err := in.RIB(ctxT(t, 5*time.Second), "", p)
		if err != nil {
			t.Fatal(err)
		}
		if (len(rib) > 0) == present {
			return time.Since(start).Round(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s present=%v not reached within 10s", in, prefix, present)
	return 0
}

func clipLog(s string) string {
	if len(s) > 1500 {
		return s[:1500] + "…"
	}
	return s
}
