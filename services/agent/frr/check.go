package frr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/internal/findings"
)

// poll is how a check waits for FRR to converge: 100 ms doubling to 1 s:
// a session comes up in 1-2 s after a start, a route about 0.5 s after a
// reload.
var poll = backoff.Policy{Base: 100 * time.Millisecond, Cap: time.Second}

// BGP checks every BGP neighbour of every VRF of an FRR instance: each must
// be Established (one shut down by the config, "Idle (Admin)", is listed
// and not checked) and, with MinPrefixes, have received at least that many
// prefixes (summed over its address families). It polls until that holds
// or its context ends (the check's timeout), then reports the last answer
// with a line per neighbour. FRR having no neighbour at all fails: the
// check is there to see sessions. FRR not answering fails at once, saying
// so.
type BGP struct {
	Label       string // "" = a name made from MinPrefixes
	FRR         Instance
	MinPrefixes int
}

var _ agent.Check = BGP{}

// Name returns Label, else "bgp" or "bgp: at least N prefixes per
// neighbour".
func (c BGP) Name() string {
	switch {
	case c.Label != "":
		return c.Label
	case c.MinPrefixes > 0:
		return fmt.Sprintf("bgp: at least %s per neighbour", plural(c.MinPrefixes, "prefix", "prefixes"))
	}
	return "bgp"
}

// Validate reports a negative MinPrefixes.
func (c BGP) Validate() error {
	if c.MinPrefixes < 0 {
		return fmt.Errorf("min prefixes %d is negative", c.MinPrefixes)
	}
	return nil
}

// Run polls "show bgp vrf all summary json" until every neighbour passes.
func (c BGP) Run(ctx context.Context, _ agent.CheckEnv) (string, error) {
	return converge(ctx, c.FRR, func(ctx context.Context) (answer, error) {
		s, err := c.FRR.BGPSummary(ctx)
		if err != nil {
			return answer{}, err
		}
		out, verdict := c.judge(s)
		return answer{out, verdict}, nil
	})
}

// judge is the check's verdict on one answer: its evidence and the first
// failure (nil if it passes).
func (c BGP) judge(s BGPSummary) (string, error) {
	var r report
	if len(s.Neighbors) == 0 {
		vrfs := "no BGP instance"
		if len(s.VRFs) > 0 {
			vrfs = "BGP in vrf " + strings.Join(s.VRFs, ", ")
		}
		r.Fail(fmt.Errorf("%w in any VRF to check (%s)", ErrNoNeighbors, vrfs))
		return r.Result()
	}
	checked := 0
	for _, n := range s.Neighbors {
		switch {
		case n.AdminDown():
			r.Line("%s: shut down by the config, not checked", n)
			continue
		case !n.Established():
			r.Fail(fmt.Errorf("bgp neighbour %s in vrf %s is %s: %w", n.Peer, n.VRF, n.State, ErrNotEstablished))
		case n.Received < c.MinPrefixes:
			r.Fail(fmt.Errorf("bgp neighbour %s in vrf %s sent %s, want at least %d: %w", n.Peer, n.VRF, plural(n.Received, "prefix", "prefixes"), c.MinPrefixes, ErrFewPrefixes))
		}
		checked++
		r.Line("%s", n)
	}
	if checked == 0 {
		r.Fail(fmt.Errorf("%w to check: every neighbour is shut down by the config", ErrNoNeighbors))
	}
	return r.Result()
}

// Route checks that Prefix is in VRF's routing table twice: in FRR's (a
// selected route to exactly that prefix) and in the kernel's, where the
// packets are routed — the main table for the default VRF, the table of
// the VRF device named VRF otherwise, or, with FRR's netns VRFs (zebra
// -n), the main table of the network namespace named VRF. It polls until
// both hold or its context ends, then reports what FRR and the kernel
// have for the prefix.
type Route struct {
	Label  string // "" = "route: " + the flag's form, PREFIX[%VRF]
	FRR    Instance
	Prefix netip.Prefix
	VRF    string // "" or "default" = the default VRF
}

var _ agent.Check = Route{}

// ParseRoute reads the flag's form PREFIX[%VRF] ("203.0.113.0/24",
// "2001:db8::/48%blue") into a Route check on inst.
func ParseRoute(s string, inst Instance) (Route, error) {
	p, vrf, _ := strings.Cut(s, "%")
	prefix, err := netip.ParsePrefix(p)
	if err != nil {
		return Route{}, fmt.Errorf("route %q: want PREFIX[%%VRF] with PREFIX in CIDR form (203.0.113.0/24): %w", s, err)
	}
	c := Route{FRR: inst, Prefix: prefix, VRF: vrf}
	return c, c.Validate()
}

// Name returns Label, else "route: PREFIX[%VRF]".
func (c Route) Name() string {
	if c.Label != "" {
		return c.Label
	}
	return "route: " + c.spec()
}

func (c Route) spec() string {
	if c.vrf() == DefaultVRF {
		return c.Prefix.String()
	}
	return c.Prefix.String() + "%" + c.VRF
}

func (c Route) vrf() string {
	if c.VRF == "" {
		return DefaultVRF
	}
	return c.VRF
}

// Validate reports a missing prefix, one with host bits set (FRR only
// has the masked form) and a VRF name with spaces.
func (c Route) Validate() error {
	switch {
	case !c.Prefix.IsValid():
		return errors.New("route: no prefix")
	case c.Prefix != c.Prefix.Masked():
		return fmt.Errorf("route %s has host bits set: write %s", c.Prefix, c.Prefix.Masked())
	case strings.ContainsAny(c.VRF, " \t\n%"):
		return fmt.Errorf("route %s: vrf %q is not a VRF name", c.Prefix, c.VRF)
	}
	return nil
}

// Run polls FRR and the kernel until both have the route.
func (c Route) Run(ctx context.Context, _ agent.CheckEnv) (string, error) {
	return converge(ctx, c.FRR, func(ctx context.Context) (answer, error) {
		rib, err := c.FRR.RIB(ctx, c.vrf(), c.Prefix)
		if err != nil {
			return answer{}, err
		}
		var r report
		selected := slices.ContainsFunc(rib, func(e RIBEntry) bool { return e.Selected })
		switch {
		case len(rib) == 0:
			r.Fail(fmt.Errorf("%s is not in FRR's routing table of vrf %s: %w", c.Prefix, c.vrf(), ErrRouteMissing))
		case !selected:
			r.Fail(fmt.Errorf("%s is in FRR's routing table of vrf %s, but no route to it is selected: %w", c.Prefix, c.vrf(), ErrRouteMissing))
		}
		for _, e := range rib {
			r.Line("FRR: %s", e)
		}
		where, routes, kerr := kernelRoutes(c.VRF, c.Prefix)
		switch {
		case kerr != nil:
			r.Fail(fmt.Errorf("%s in the kernel: %w", c.Prefix, kerr))
		case len(routes) == 0:
			r.Fail(fmt.Errorf("%s is not in the kernel's %s: %w", c.Prefix, where, ErrNotInKernel))
		}
		for _, k := range routes {
			r.Line("kernel %s: %s", where, k)
		}
		out, verdict := r.Result()
		return answer{out, verdict}, nil
	})
}

// answer is what one look at FRR found: the evidence, and the first
// failure (nil: the check passes).
type answer struct {
	out     string
	verdict error
}

// converge runs look until its verdict is nil or ctx ends, backing off
// between looks, and returns the last answer. FRR not answering (look's
// error) ends it at once: waiting brings no answer, and the agent's
// retries are there for that.
func converge(ctx context.Context, inst Instance, look func(context.Context) (answer, error)) (string, error) {
	start := time.Now()
	b := backoff.New(poll)
	var last *answer
	for polls := 1; ; polls++ {
		a, err := look(ctx)
		if err != nil {
			if last != nil && ctx.Err() != nil {
				break // the deadline cut a look short: the one before is the evidence
			}
			if errors.Is(err, ErrNotRunning) || errors.Is(err, ErrNotInstalled) || errors.Is(err, ErrNoAnswer) {
				return fmt.Sprintf("%s: cannot ask FRR: %v", inst, err), fmt.Errorf("FRR is unreachable: %w", err)
			}
			return fmt.Sprintf("%s: cannot read FRR's state: %v", inst, err), fmt.Errorf("cannot read FRR's state: %w", err)
		}
		if a.verdict == nil {
			return fmt.Sprintf("%s, answer %d after %s:\n%s", inst, polls, since(start), a.out), nil
		}
		last = &a
		if b.Wait(ctx) != nil {
			break
		}
	}
	return fmt.Sprintf("%s, last answer after %s of waiting:\n%s", inst, since(start), last.out),
		fmt.Errorf("after %s: %w", since(start), last.verdict)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// kernelRoutes returns the kernel's routes to exactly prefix in vrf's
// table, and which table that is ("main table", "table 10 (vrf blue)",
// "main table of network namespace blue"). It looks in the network
// namespace of the calling thread.
func kernelRoutes(vrf string, prefix netip.Prefix) (where string, routes []string, err error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return "", nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	table, where := unix.RT_TABLE_MAIN, "main table"
	if vrf != "" && vrf != DefaultVRF {
		link, lerr := h.LinkByName(vrf)
		var vrfDev *netlink.Vrf
		if lerr == nil {
			vrfDev, _ = link.(*netlink.Vrf)
		}
		switch {
		case vrfDev != nil:
			table, where = int(vrfDev.Table), fmt.Sprintf("table %d (vrf %s)", vrfDev.Table, vrf)
		case lerr == nil:
			return "", nil, fmt.Errorf("device %s is a %s, not a VRF", vrf, link.Type())
		default:
			// FRR's netns VRF backend: the VRF is a named network namespace.
			ns, nerr := netns.GetFromName(vrf)
			if nerr != nil {
				return "", nil, fmt.Errorf("no VRF device %s in the kernel, nor a network namespace %s (FRR's netns VRFs): %w", vrf, vrf, lerr)
			}
			defer func() { _ = ns.Close() }()
			h.Close()
			if h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE); err != nil {
				return "", nil, fmt.Errorf("netlink in network namespace %s: %w", vrf, err)
			}
			where = "main table of network namespace " + vrf
		}
	}
	family := netlink.FAMILY_V4
	if prefix.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	list, err := h.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return where, nil, fmt.Errorf("list the kernel's %s: %w", where, err)
	}
	for _, rt := range list {
		if routeDst(rt, family) == prefix.Masked() {
			routes = append(routes, kernelRouteString(h, rt, prefix))
		}
	}
	return where, routes, nil
}

// routeDst is a kernel route's destination; a default route has none.
func routeDst(rt netlink.Route, family int) netip.Prefix {
	if rt.Dst == nil {
		if family == netlink.FAMILY_V6 {
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	a, ok := netip.AddrFromSlice(rt.Dst.IP)
	if !ok {
		return netip.Prefix{}
	}
	ones, _ := rt.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// kernelRouteString is one kernel route as "ip route" shows it:
// "203.0.113.0/24 via 192.0.2.1 dev uplink proto bgp metric 20".
func kernelRouteString(h *netlink.Handle, rt netlink.Route, prefix netip.Prefix) string {
	var b strings.Builder
	if rt.Type == unix.RTN_BLACKHOLE {
		b.WriteString("blackhole ")
	}
	b.WriteString(prefix.String())
	gws := []net.IP{rt.Gw}
	devs := []int{rt.LinkIndex}
	for _, nh := range rt.MultiPath {
		gws, devs = append(gws, nh.Gw), append(devs, nh.LinkIndex)
	}
	for i := range gws {
		if gws[i] != nil {
			fmt.Fprintf(&b, " via %s", gws[i])
		}
		if devs[i] > 0 {
			name := fmt.Sprint(devs[i])
			if l, err := h.LinkByIndex(devs[i]); err == nil {
				name = l.Attrs().Name
			}
			fmt.Fprintf(&b, " dev %s", name)
		}
	}
	fmt.Fprintf(&b, " proto %s", rt.Protocol)
	if rt.Priority > 0 {
		fmt.Fprintf(&b, " metric %d", rt.Priority)
	}
	return b.String()
}

// report is a check's evidence and failures (findings.Report).
type report = findings.Report
