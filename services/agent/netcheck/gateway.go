package netcheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// Gateway checks the anycast gateways of the applied config's layer2
// networks. For each network with gateways, its bridge
// (hostnet.BridgeName) must exist and be up, and every gateway address must
// be on it or on a macvlan device on it (the applier's gateway device, with
// the anycast MAC), with the config's prefix length.
//
// Then it pings the network's Targets from this node's own address in the
// network — an address on the bridge that is not a gateway: a reply to an
// anycast gateway address would go to whichever node answers for it —
// inside the network's VRF device (hostnet.VRFName) when that exists, else
// bound to the bridge. A network without targets pings its own gateways
// instead, inside the VRF device or, without one, in the main table: a
// local proof that they answer where they are routed.
type Gateway struct {
	Label string // "" = a name made from the targets
	// Targets are the addresses to ping, per VLAN. Targets of a VLAN the
	// applied config does not have on this node are skipped.
	Targets map[uint32][]netip.Addr
	// Wait is how long a ping waits for its reply (default DefaultWait).
	Wait time.Duration
}

var _ agent.Check = Gateway{}

// Name returns Label, else "gateway" followed by the targets in the flag's
// form: "gateway: 100=10.100.0.12,10.100.0.13 200=fd00:200::12".
func (c Gateway) Name() string {
	if c.Label != "" {
		return c.Label
	}
	if len(c.Targets) == 0 {
		return "gateway"
	}
	var vlans []string
	for _, vlan := range slices.Sorted(maps.Keys(c.Targets)) {
		vlans = append(vlans, fmt.Sprintf("%d=%s", vlan, joinAddrs(c.Targets[vlan], ",")))
	}
	return "gateway: " + strings.Join(vlans, " ")
}

// Validate reports a VLAN out of range, a VLAN without targets, a target
// that is not a unicast address one can ping, a target given twice and a
// negative wait.
func (c Gateway) Validate() error {
	if c.Wait < 0 {
		return fmt.Errorf("wait %s is negative", c.Wait)
	}
	for _, vlan := range slices.Sorted(maps.Keys(c.Targets)) {
		ts := c.Targets[vlan]
		switch {
		case vlan < 1 || vlan > 4094:
			return fmt.Errorf("targets: vlan %d is not 1-4094", vlan)
		case len(ts) == 0:
			return fmt.Errorf("targets: vlan %d has no target", vlan)
		}
		seen := map[netip.Addr]bool{}
		for _, a := range ts {
			if err := validTarget(a); err != nil {
				return fmt.Errorf("targets: vlan %d: %w", vlan, err)
			}
			if seen[a] {
				return fmt.Errorf("targets: vlan %d: %s given twice", vlan, a)
			}
			seen[a] = true
		}
	}
	return nil
}

// Run checks each network of env.Config with gateways and pings the
// targets of all of them at once. The output has a line per network and
// one per ping; the error names the first failure.
func (c Gateway) Run(ctx context.Context, env agent.CheckEnv) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	wait := cmp.Or(c.Wait, DefaultWait)
	nets := layer2Networks(env.Config)
	var r report
	if len(nets) == 0 {
		r.Line("no layer2 network with anycast gateways in the applied config")
	}
	// Look at the host and open every socket first, on this goroutine: the
	// sockets belong to the calling thread's network namespace, which
	// other goroutines' threads need not share.
	plans := make([]gatewayPlan, len(nets))
	var pingers []*pingJob
	for i, n := range nets {
		plans[i] = c.plan(ctx, n)
		pingers = append(pingers, plans[i].jobs...)
	}
	var wg sync.WaitGroup
	for _, j := range pingers {
		wg.Go(func() { j.run(ctx, wait) })
	}
	wg.Wait()

	for _, p := range plans {
		r.Add(p.r)
		for _, step := range p.after {
			step(&r)
		}
	}
	in := map[uint32]bool{}
	for _, n := range nets {
		in[n.vlan] = true
	}
	for _, vlan := range slices.Sorted(maps.Keys(c.Targets)) {
		if !in[vlan] {
			r.Line("vlan %d: not in the applied config on this node; %s not pinged", vlan, joinAddrs(c.Targets[vlan], ", "))
		}
	}
	return r.Result()
}

// network is a layer2 network of the applied config with anycast gateways.
type network struct {
	name     string // the intent's
	vlan     uint32
	vrf      string
	gateways []netip.Prefix
	bad      error // a gateway that is not in CIDR form
}

// String names n in messages: "vlan 100 (tenant-a)".
func (n network) String() string {
	if n.name == "" {
		return fmt.Sprintf("vlan %d", n.vlan)
	}
	return fmt.Sprintf("vlan %d (%s)", n.vlan, n.name)
}

// layer2Networks returns the layer2 networks of cfg that have anycast
// gateways, in the config's order.
func layer2Networks(cfg *sluicev1.DesiredConfig) []network {
	var out []network
	for _, in := range cfg.GetConfig().GetIntents() {
		l2 := in.GetLayer2Network()
		if len(l2.GetAnycastGateways()) == 0 {
			continue
		}
		n := network{name: in.GetName(), vlan: l2.GetVlan(), vrf: l2.GetVrf()}
		for _, g := range l2.GetAnycastGateways() {
			p, err := netip.ParsePrefix(g)
			if err != nil {
				n.bad = fmt.Errorf("anycast gateway %q is not an address in CIDR form: %w", g, err)
				break
			}
			n.gateways = append(n.gateways, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()))
		}
		out = append(out, n)
	}
	return out
}

// gatewayPlan is what the check found on the host for one network and the
// pings it is to send.
type gatewayPlan struct {
	net  network
	r    report
	jobs []*pingJob
	// after reports the pings, in the targets' order, once they ran.
	after []func(*report)
}

func (p *gatewayPlan) fail(err error) { p.r.Fail(fmt.Errorf("%s: %w", p.net, err)) }

// plan looks at what the host has for n and opens the sockets of its
// pings.
func (c Gateway) plan(ctx context.Context, n network) gatewayPlan {
	p := gatewayPlan{net: n}
	targets := c.Targets[n.vlan]
	st, err := inspect(n)
	if err != nil {
		p.fail(err)
		if len(targets) > 0 {
			p.r.Line("%s: %s not pinged", n, joinAddrs(targets, ", "))
		}
		return p
	}
	dev, where := st.sendDevice(n, len(targets) > 0)
	p.r.Line("%s: bridge %s up; gateways %s on %s; node addresses %s; pinging %s",
		n, st.bridge, joinPrefixes(n.gateways), strings.Join(st.on, ", "), prefixes(st.nodeAddrs), where)

	// What to ping from where: each target from the node address of its
	// family, or, without targets, each gateway (from the node address
	// when there is one: the kernel would choose the gateway itself).
	type key struct {
		v6  bool
		src netip.Addr
	}
	jobs := map[key]*pingJob{}
	var order []key
	add := func(dst, src netip.Addr, label string) {
		k := key{v6: dst.Is6(), src: src}
		j := jobs[k]
		if j == nil {
			j = &pingJob{v6: k.v6, src: src, dev: dev}
			jobs[k] = j
			order = append(order, k)
		}
		if slices.Contains(j.dsts, dst) {
			return
		}
		i := len(j.dsts)
		j.dsts, j.labels = append(j.dsts, dst), append(j.labels, label)
		p.after = append(p.after, func(r *report) { j.reportOne(r, i, n.String()+": ") })
	}
	if len(targets) > 0 {
		for _, t := range targets {
			src, err := sourceFor(t, st.nodeAddrs, st.bridge, n.gateways)
			if err != nil {
				err = fmt.Errorf("%s: %s: %w", n, t, err)
				p.after = append(p.after, func(r *report) { r.Fail(err) })
				continue
			}
			add(t, src, t.String())
		}
	} else {
		for _, g := range n.gateways {
			src, _ := sourceFor(g.Addr(), st.nodeAddrs, st.bridge, n.gateways)
			add(g.Addr(), src, "gateway "+g.Addr().String())
		}
	}
	for _, k := range order {
		j := jobs[k]
		j.open(ctx)
		p.jobs = append(p.jobs, j)
	}
	return p
}

// netState is what the host has for a network.
type netState struct {
	bridge    string
	on        []string    // the devices with the gateways
	nodeAddrs []ifaceAddr // the bridge's addresses that are not gateways
	vrfDev    string      // the network's VRF device; "" = none
}

// sendDevice is the device pings are bound to and where that is, for the
// output: inside the VRF device when there is one, else bound to the
// bridge when the pings leave the node (to targets), else unbound, in the
// main table, where the gateways are when there is no VRF device.
func (st netState) sendDevice(n network, toTargets bool) (dev, where string) {
	missing := ""
	switch {
	case st.vrfDev != "":
		return st.vrfDev, "inside " + st.vrfDev
	case n.vrf == "":
		missing = "the network has no VRF"
	default:
		missing = "no VRF device " + hostnet.VRFName(n.vrf)
	}
	if toTargets {
		return st.bridge, fmt.Sprintf("bound to %s (%s)", st.bridge, missing)
	}
	return "", fmt.Sprintf("in the main routing table (%s)", missing)
}

// inspect checks that n's bridge is up and carries its gateways (or a
// macvlan on it does), and finds the device and addresses to ping from.
func inspect(n network) (netState, error) {
	if n.bad != nil {
		return netState{}, n.bad
	}
	st := netState{bridge: hostnet.BridgeName(n.vlan)}
	br, err := linkByName(st.bridge)
	if err != nil {
		return st, fmt.Errorf("bridge %w", err)
	}
	if t := br.Type(); t != "bridge" {
		return st, fail(ErrLinkMissing, "%s is a %s device, not a bridge", st.bridge, t)
	}
	if !isUp(br.Attrs().Flags) {
		return st, fail(ErrLinkDown, "bridge %s is down", st.bridge)
	}
	holders, err := gatewayHolders(br)
	if err != nil {
		return st, err
	}
	on, err := gatewaysOn(n.gateways, holders)
	if err != nil {
		return st, err
	}
	if st.vrfDev, err = vrfDevice(n, br, on); err != nil {
		return st, err
	}
	for _, l := range on {
		st.on = append(st.on, l.Attrs().Name)
	}
	st.nodeAddrs = notGateways(holders[0].addrs, n.gateways)
	return st, nil
}

// holder is a device that may carry a network's gateway addresses: its
// bridge, or a macvlan device on the bridge (where the applier puts them,
// with the anycast MAC address).
type holder struct {
	link  netlink.Link
	addrs []ifaceAddr
}

// gatewayHolders returns the bridge br and the macvlans on it, with their
// addresses.
func gatewayHolders(br netlink.Link) ([]holder, error) {
	mvs, err := macvlansOn(br)
	if err != nil {
		return nil, err
	}
	var hs []holder
	for _, l := range append([]netlink.Link{br}, mvs...) {
		as, err := linkAddrs(l)
		if err != nil {
			return nil, err
		}
		hs = append(hs, holder{link: l, addrs: as})
	}
	return hs, nil
}

// gatewaysOn returns the devices among holders that carry the gateways,
// each gateway with the config's prefix length, usable, on a device that is
// up. Its error lists every gateway that is not so.
func gatewaysOn(gateways []netip.Prefix, holders []holder) ([]netlink.Link, error) {
	bridge := holders[0].link.Attrs().Name
	var on []netlink.Link
	var problems []string
	for _, g := range gateways {
		var h holder
		var a ifaceAddr
		found := false
		for _, c := range holders {
			if i := slices.IndexFunc(c.addrs, func(a ifaceAddr) bool { return a.prefix.Addr() == g.Addr() }); i >= 0 {
				h, a, found = c, c.addrs[i], true
				break
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("gateway %s is not on %s nor on a macvlan on it", g, bridge))
			continue
		}
		name := h.link.Attrs().Name
		switch {
		case a.prefix.Bits() != g.Bits():
			problems = append(problems, fmt.Sprintf("gateway %s is on %s as %s", g, name, a.prefix))
		case !isUp(h.link.Attrs().Flags):
			problems = append(problems, fmt.Sprintf("gateway %s is on %s, which is down", g, name))
		case !a.usable():
			problems = append(problems, fmt.Sprintf("gateway %s on %s is %s", g, name, a.state()))
		default:
			if !slices.ContainsFunc(on, func(l netlink.Link) bool { return l.Attrs().Name == name }) {
				on = append(on, h.link)
			}
		}
	}
	if len(problems) == 0 {
		return on, nil
	}
	var has []string
	for _, c := range holders {
		has = append(has, fmt.Sprintf("%s has %s", c.link.Attrs().Name, prefixes(c.addrs)))
	}
	return nil, fail(ErrAddressMissing, "%s (%s)", strings.Join(problems, "; "), strings.Join(has, "; "))
}

// vrfDevice returns the device of n's VRF when it exists ("" when it
// does not, or n has no VRF); the bridge and the devices with the gateways
// must then be in it.
func vrfDevice(n network, br netlink.Link, on []netlink.Link) (string, error) {
	if n.vrf == "" {
		return "", nil
	}
	name := hostnet.VRFName(n.vrf)
	vrf, err := linkByName(name)
	if errors.Is(err, ErrLinkMissing) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if t := vrf.Type(); t != "vrf" {
		return "", fail(ErrNotInVRF, "%s (of vrf %s) is a %s device, not a VRF", name, n.vrf, t)
	}
	for _, l := range append([]netlink.Link{br}, on...) {
		if l.Attrs().MasterIndex != vrf.Attrs().Index {
			return "", fail(ErrNotInVRF, "%s is not in %s, the device of vrf %s", l.Attrs().Name, name, n.vrf)
		}
	}
	return name, nil
}

// notGateways returns the addresses of addrs a node can send from that are
// not gateways: global (not link-local) unicast addresses.
func notGateways(addrs []ifaceAddr, gateways []netip.Prefix) []ifaceAddr {
	var out []ifaceAddr
	for _, a := range addrs {
		ip := a.prefix.Addr()
		if !ip.IsGlobalUnicast() || slices.ContainsFunc(gateways, func(g netip.Prefix) bool { return g.Addr() == ip }) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// sourceFor picks the node address to ping dst from: a usable one of its
// family, one whose prefix holds dst first, then the lowest.
func sourceFor(dst netip.Addr, nodeAddrs []ifaceAddr, bridge string, gateways []netip.Prefix) (netip.Addr, error) {
	var usable, unusable []ifaceAddr
	for _, a := range nodeAddrs {
		switch {
		case a.prefix.Addr().Is4() != dst.Is4():
		case a.usable():
			usable = append(usable, a)
		default:
			unusable = append(unusable, a)
		}
	}
	if len(usable) == 0 {
		var why []string
		for _, a := range unusable {
			why = append(why, fmt.Sprintf("%s is %s", a.prefix, a.state()))
		}
		if len(why) > 0 {
			return netip.Addr{}, fail(ErrAddressMissing, "no usable node address on %s to send from (%s)", bridge, strings.Join(why, "; "))
		}
		return netip.Addr{}, fail(ErrAddressMissing, "no node address of its family on %s to send from (the anycast gateways %s cannot be a source)", bridge, joinPrefixes(gateways))
	}
	slices.SortFunc(usable, func(a, b ifaceAddr) int {
		if ca, cb := a.prefix.Contains(dst), b.prefix.Contains(dst); ca != cb {
			if ca {
				return -1
			}
			return 1
		}
		return a.prefix.Addr().Compare(b.prefix.Addr())
	})
	return usable[0].prefix.Addr(), nil
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
