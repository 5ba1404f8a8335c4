package hostnet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// OpKind is what an Op does.
type OpKind string

// The kinds of Op.
const (
	OpCreate          OpKind = "create"
	OpDelete          OpKind = "delete"
	OpSetMTU          OpKind = "mtu"
	OpSetHardwareAddr OpKind = "hwaddr"
	OpSetARPStrict    OpKind = "arp"
	OpSetMaster       OpKind = "master"
	OpSetUp           OpKind = "up"
	OpAddAddr         OpKind = "addr-add"
	OpDelAddr         OpKind = "addr-del"
	OpAddFDB          OpKind = "fdb-add"
	OpDelFDB          OpKind = "fdb-del"
)

// Op is one change to the host's owned links. Link names the link; the
// other fields are the operands of Kind.
type Op struct {
	Kind OpKind
	Link string
	// Create is the link as OpCreate creates it: name, kind, the fixed
	// fields, MTU and hardware address. Everything else follows in later ops.
	Create       Link
	MTU          int
	HardwareAddr string
	Master       string // "" = release from its master
	Up           bool
	Addr         Addr
	FDB          FDBEntry
}

// String describes o for logs and errors, e.g. "set br.v10 master vrf-red".
func (o Op) String() string {
	switch o.Kind {
	case OpCreate:
		return "create " + describe(o.Create)
	case OpDelete:
		return "delete " + o.Link
	case OpSetMTU:
		return fmt.Sprintf("set %s mtu %d", o.Link, o.MTU)
	case OpSetHardwareAddr:
		return fmt.Sprintf("set %s address %s", o.Link, o.HardwareAddr)
	case OpSetARPStrict:
		return fmt.Sprintf("set %s arp strict", o.Link)
	case OpSetMaster:
		if o.Master == "" {
			return fmt.Sprintf("set %s nomaster", o.Link)
		}
		return fmt.Sprintf("set %s master %s", o.Link, o.Master)
	case OpSetUp:
		if o.Up {
			return fmt.Sprintf("set %s up", o.Link)
		}
		return fmt.Sprintf("set %s down", o.Link)
	case OpAddAddr:
		return fmt.Sprintf("add address %s to %s", o.Addr, o.Link)
	case OpDelAddr:
		return fmt.Sprintf("remove address %s from %s", o.Addr, o.Link)
	case OpAddFDB:
		return fmt.Sprintf("add fdb %s to %s", o.FDB, o.Link)
	case OpDelFDB:
		return fmt.Sprintf("remove fdb %s from %s", o.FDB, o.Link)
	}
	return fmt.Sprintf("%s %s", o.Kind, o.Link)
}

// describe names l with its kind and the attributes it is created with.
func describe(l Link) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", l.Kind, l.Name)
	switch l.Kind {
	case KindVXLAN:
		fmt.Fprintf(&b, " vni %d port %d", l.VNI, l.Port)
		if l.Local.IsValid() {
			fmt.Fprintf(&b, " local %s", l.Local)
		}
		if l.Dev != "" {
			fmt.Fprintf(&b, " dev %s", l.Dev)
		}
		if l.Learning {
			b.WriteString(" learning")
		}
	case KindMacvlan:
		fmt.Fprintf(&b, " on %s", l.Parent)
	case KindVRF:
		fmt.Fprintf(&b, " table %d", l.Table)
	}
	if l.HardwareAddr != "" {
		fmt.Fprintf(&b, " address %s", l.HardwareAddr)
	}
	if l.MTU != 0 {
		fmt.Fprintf(&b, " mtu %d", l.MTU)
	}
	return b.String()
}

// rank orders kinds by dependency: a link may be enslaved to or sit on only
// links of a lower rank. Links are created in ascending and deleted in
// descending rank.
func rank(k Kind) int {
	switch k {
	case KindVRF:
		return 0
	case KindBridge:
		return 1
	case KindMacvlan:
		return 2
	}
	return 3 // VXLAN, and anything else a host might have under an owned name
}

// Diff returns the operations that turn current (the owned links as read
// from the host) into desired, in the order they must run:
//
//  1. delete the links that must be created anew (a fixed attribute
//     changed: a VXLAN's VNI, port, local address or source device, a VRF's
//     table, a gateway's bridge, or the kind), with the gateways on them,
//     and removed links whose VNI or table a desired link takes;
//  2. create and converge the desired links by rank: VRFs, then bridges
//     (enslaved to VRFs), then gateways (on bridges), then VXLAN devices
//     (enslaved to bridges) — per link its MTU, hardware address, ARP
//     policy, master, up, addresses and FDB entries;
//  3. delete the links desired no longer has, dependents first.
//
// Diff models what the kernel does as a side effect (a deleted link's
// slaves are released and the gateways on it go; moving a link into or out
// of a VRF drops its IPv6 addresses; lowering a bridge's MTU lowers its
// gateway's), so it asks for exactly what is then missing. IPv6 link-local
// addresses in current are left alone: the kernel adds them. The same
// current and desired always give the same ops; equal states give none.
func Diff(current, desired Desired) []Op {
	p := newPlan(current)
	want := map[string]Link{}
	for _, l := range desired.Links {
		want[l.Name] = l
	}

	// 1. Early deletes.
	early := map[string]bool{}
	for _, c := range current.Links {
		w, ok := want[c.Name]
		if (ok && !sameFixed(c, w)) || (!ok && takenByDesired(c, desired)) {
			early[c.Name] = true
		}
	}
	for _, c := range current.Links {
		if c.Kind == KindMacvlan && early[c.Parent] {
			early[c.Name] = true // the kernel would delete it with its bridge
		}
	}
	for _, c := range byRank(current.Links, true) {
		if early[c.Name] {
			p.do(Op{Kind: OpDelete, Link: c.Name})
		}
	}

	// 2. Create and converge.
	for _, w := range byRank(desired.Links, false) {
		if _, ok := p.state[w.Name]; !ok {
			p.do(Op{Kind: OpCreate, Link: w.Name, Create: creatable(w)})
		}
		p.converge(w)
	}

	// 3. Late deletes.
	for _, c := range byRank(current.Links, true) {
		if _, ok := want[c.Name]; !ok {
			if _, exists := p.state[c.Name]; exists {
				p.do(Op{Kind: OpDelete, Link: c.Name})
			}
		}
	}
	return p.ops
}

// takenByDesired reports whether a desired link takes what c, a link being
// removed, holds and the kernel gives only one link at a time: a VXLAN VNI
// or a VRF table. c must then go before the desired link is created.
func takenByDesired(c Link, desired Desired) bool {
	for _, w := range desired.Links {
		if w.Kind == c.Kind && ((c.Kind == KindVXLAN && w.VNI == c.VNI) || (c.Kind == KindVRF && w.Table == c.Table)) {
			return true
		}
	}
	return false
}

// byRank returns links sorted by rank (descending when reverse) and name.
func byRank(links []Link, reverse bool) []Link {
	out := slices.Clone(links)
	slices.SortStableFunc(out, func(a, b Link) int {
		r := cmp.Compare(rank(a.Kind), rank(b.Kind))
		if reverse {
			r = -r
		}
		return cmp.Or(r, cmp.Compare(a.Name, b.Name))
	})
	return out
}

// creatable is the part of l that creating it sets.
func creatable(l Link) Link {
	return Link{
		Name: l.Name, Kind: l.Kind, VNI: l.VNI, Port: l.Port, Local: l.Local, Dev: l.Dev, Learning: l.Learning,
		Parent: l.Parent, Table: l.Table, MTU: l.MTU, HardwareAddr: l.HardwareAddr,
	}
}

// plan collects ops and tracks the state they lead to.
type plan struct {
	state map[string]Link
	ops   []Op
}

func newPlan(current Desired) *plan {
	p := &plan{state: map[string]Link{}}
	for _, l := range current.Links {
		l.Addrs, l.FDB = slices.Clone(l.Addrs), slices.Clone(l.FDB)
		p.state[l.Name] = l
	}
	return p
}

// do records op and applies it, with the kernel's side effects, to the
// tracked state.
func (p *plan) do(op Op) {
	p.ops = append(p.ops, op)
	simulate(p.state, op)
}

// converge emits the ops that make the existing link named w.Name equal w
// in everything but its fixed fields.
func (p *plan) converge(w Link) {
	c := p.state[w.Name]
	if w.MTU != 0 && c.MTU != w.MTU {
		p.do(Op{Kind: OpSetMTU, Link: w.Name, MTU: w.MTU})
	}
	if w.HardwareAddr != "" && c.HardwareAddr != w.HardwareAddr {
		p.do(Op{Kind: OpSetHardwareAddr, Link: w.Name, HardwareAddr: w.HardwareAddr})
	}
	if w.ARPStrict && !c.ARPStrict {
		p.do(Op{Kind: OpSetARPStrict, Link: w.Name})
	}
	if c.Master != w.Master {
		p.do(Op{Kind: OpSetMaster, Link: w.Name, Master: w.Master})
	}
	if c.Up != w.Up {
		p.do(Op{Kind: OpSetUp, Link: w.Name, Up: w.Up})
	}
	// Re-read: the master change may have dropped addresses.
	c = p.state[w.Name]
	for _, a := range c.Addrs {
		if ip := a.Prefix.Addr(); ip.Is6() && ip.IsLinkLocalUnicast() {
			continue // the kernel's, not ours to manage
		}
		if !slices.Contains(w.Addrs, a) {
			p.do(Op{Kind: OpDelAddr, Link: w.Name, Addr: a})
		}
	}
	for _, a := range w.Addrs {
		if !slices.Contains(c.Addrs, a) {
			p.do(Op{Kind: OpAddAddr, Link: w.Name, Addr: a})
		}
	}
	for _, e := range c.FDB {
		if !slices.Contains(w.FDB, e) {
			p.do(Op{Kind: OpDelFDB, Link: w.Name, FDB: e})
		}
	}
	for _, e := range w.FDB {
		if !slices.Contains(c.FDB, e) {
			p.do(Op{Kind: OpAddFDB, Link: w.Name, FDB: e})
		}
	}
}

// simulate applies op to state as the kernel would, side effects included.
func simulate(state map[string]Link, op Op) {
	l := state[op.Link]
	isVRF := func(name string) bool { return name != "" && state[name].Kind == KindVRF }
	switch op.Kind {
	case OpCreate:
		state[op.Link] = op.Create
		return
	case OpDelete:
		delete(state, op.Link)
		for name, s := range state {
			switch {
			case s.Kind == KindMacvlan && s.Parent == op.Link:
				delete(state, name)
			case s.Master == op.Link:
				if l.Kind == KindVRF && s.Up {
					s.Addrs = withoutIPv6(s.Addrs)
				}
				s.Master = ""
				state[name] = s
			}
		}
		return
	case OpSetMTU:
		l.MTU = op.MTU
		for name, s := range state {
			if s.Kind == KindMacvlan && s.Parent == op.Link && s.MTU > op.MTU {
				s.MTU = op.MTU
				state[name] = s
			}
		}
	case OpSetHardwareAddr:
		l.HardwareAddr = op.HardwareAddr
	case OpSetARPStrict:
		l.ARPStrict = true
	case OpSetMaster:
		// The kernel cycles a running link that joins or leaves a VRF, and
		// a link going down loses its IPv6 addresses.
		if l.Up && (isVRF(l.Master) || isVRF(op.Master)) {
			l.Addrs = withoutIPv6(l.Addrs)
		}
		l.Master = op.Master
	case OpSetUp:
		if !op.Up {
			l.Addrs = withoutIPv6(l.Addrs)
		}
		l.Up = op.Up
	// The slices are copied, never changed in place: converge ranges over
	// the ones it read before.
	case OpAddAddr:
		l.Addrs = append(slices.Clone(l.Addrs), op.Addr)
		slices.SortFunc(l.Addrs, compareAddr)
	case OpDelAddr:
		l.Addrs = slices.DeleteFunc(slices.Clone(l.Addrs), func(a Addr) bool { return a == op.Addr })
	case OpAddFDB:
		l.FDB = append(slices.Clone(l.FDB), op.FDB)
		slices.SortFunc(l.FDB, compareFDB)
	case OpDelFDB:
		l.FDB = slices.DeleteFunc(slices.Clone(l.FDB), func(e FDBEntry) bool { return e == op.FDB })
	}
	state[op.Link] = l
}

func withoutIPv6(addrs []Addr) []Addr {
	return slices.DeleteFunc(slices.Clone(addrs), func(a Addr) bool { return a.Prefix.Addr().Is6() })
}
