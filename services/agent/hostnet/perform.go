package hostnet

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// executor performs ops in one namespace and counts its netlink writes.
type executor struct {
	h      *netlink.Handle
	conf   *devconf
	writes int
}

// write counts one netlink write request and returns its error.
func (x *executor) write(err error) error {
	x.writes++
	return err
}

// link looks up a link by name.
func (x *executor) link(name string) (netlink.Link, error) {
	l, err := x.h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	return l, nil
}

// perform runs op. Its error names the op.
func (x *executor) perform(op Op) error {
	if err := x.do(op); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

func (x *executor) do(op Op) error {
	if op.Kind == OpCreate {
		return x.create(op.Create)
	}
	l, err := x.link(op.Link)
	if err != nil {
		return err
	}
	switch op.Kind {
	case OpDelete:
		return x.write(x.h.LinkDel(l))
	case OpSetMTU:
		err := x.write(x.h.LinkSetMTU(l, op.MTU))
		if _, vxlan := l.(*netlink.Vxlan); vxlan && errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%w (%s)", err, vxlanMTUHint)
		}
		return err
	case OpSetHardwareAddr:
		mac, err := net.ParseMAC(op.HardwareAddr)
		if err != nil {
			return err
		}
		return x.write(x.h.LinkSetHardwareAddr(l, mac))
	case OpSetARPStrict:
		return x.write(x.conf.setStrictARP(l.Attrs().Index))
	case OpSetMaster:
		if op.Master == "" {
			return x.write(x.h.LinkSetNoMaster(l))
		}
		m, err := x.link(op.Master)
		if err != nil {
			return err
		}
		return x.write(x.h.LinkSetMasterByIndex(l, m.Attrs().Index))
	case OpSetUp:
		if op.Up {
			return x.write(x.h.LinkSetUp(l))
		}
		return x.write(x.h.LinkSetDown(l))
	case OpAddAddr:
		// Replace, not add: moving a link between VRFs may or may not have
		// dropped the address, depending on the host's keep_addr_on_down.
		return x.write(x.h.AddrReplace(l, netlinkAddr(op.Addr)))
	case OpDelAddr:
		return x.write(x.h.AddrDel(l, netlinkAddr(op.Addr)))
	case OpAddFDB:
		n, err := fdbNeigh(l, op.FDB)
		if err != nil {
			return err
		}
		if op.FDB.Dst.IsValid() {
			// Append: a VXLAN device has one all-zeros entry per peer.
			return x.write(x.h.NeighAppend(n))
		}
		return x.write(x.h.NeighAdd(n))
	case OpDelFDB:
		n, err := fdbNeigh(l, op.FDB)
		if err != nil {
			return err
		}
		return x.write(x.h.NeighDel(n))
	}
	return fmt.Errorf("unknown op kind %q", op.Kind)
}

// vxlanMTUHint explains the usual reason the kernel refuses a VXLAN MTU.
const vxlanMTUHint = "a VXLAN device's MTU can be at most its uplink's MTU minus 50 bytes (70 over IPv6)"

// create creates l with its alias, and pins what the kernel would otherwise
// change behind the applier's back.
func (x *executor) create(l Link) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = l.Name, l.MTU
	if l.HardwareAddr != "" {
		mac, err := net.ParseMAC(l.HardwareAddr)
		if err != nil {
			return err
		}
		attrs.HardwareAddr = mac
	}
	var link netlink.Link
	switch l.Kind {
	case KindVRF:
		link = &netlink.Vrf{LinkAttrs: attrs, Table: l.Table}
	case KindBridge:
		link = &netlink.Bridge{LinkAttrs: attrs}
	case KindMacvlan:
		parent, err := x.link(l.Parent)
		if err != nil {
			return err
		}
		attrs.ParentIndex = parent.Attrs().Index
		link = &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}
	case KindVXLAN:
		v := &netlink.Vxlan{LinkAttrs: attrs, VxlanId: int(l.VNI), Port: int(l.Port), Learning: l.Learning}
		if l.Local.IsValid() {
			v.SrcAddr = net.IP(l.Local.AsSlice())
		}
		if l.Dev != "" {
			dev, err := x.h.LinkByName(l.Dev)
			if err != nil {
				return fmt.Errorf("uplink %s: %w", l.Dev, err)
			}
			v.VtepDevIndex = dev.Attrs().Index
		}
		link = v
	default:
		return fmt.Errorf("cannot create a link of kind %q", l.Kind)
	}

	if err := x.write(x.h.LinkAdd(link)); err != nil {
		switch {
		case l.Kind == KindVRF && errors.Is(err, unix.EOPNOTSUPP):
			return ErrNoVRFSupport
		case l.Kind == KindVXLAN && errors.Is(err, unix.EINVAL):
			return fmt.Errorf("%w (%s)", err, vxlanMTUHint)
		}
		return err
	}
	created, err := x.link(l.Name)
	if err != nil {
		return err
	}
	// The kernel ignores the alias in a create request. Until it is set the
	// link is not owned, and a rollback would not see it: delete it here.
	if err := x.write(x.h.LinkSetAlias(created, Alias)); err != nil {
		_ = x.write(x.h.LinkDel(created))
		return fmt.Errorf("set alias %q: %w", Alias, err)
	}
	switch l.Kind {
	case KindBridge:
		// Setting the bridge's own address keeps it: otherwise the kernel
		// gives the bridge the lowest address of its ports, and a port
		// added later would change it under the node address.
		if err := x.write(x.h.LinkSetHardwareAddr(created, created.Attrs().HardwareAddr)); err != nil {
			return fmt.Errorf("keep the bridge's address: %w", err)
		}
	case KindMacvlan:
		// No IPv6 link-local address from the anycast MAC: every node would
		// have the same one, and duplicate address detection would fail it
		// on all but the first.
		err := x.write(x.h.LinkSetIP6AddrGenMode(created, nl.IN6_ADDR_GEN_MODE_NONE))
		if err != nil && !errors.Is(err, unix.EAFNOSUPPORT) { // EAFNOSUPPORT: IPv6 is off
			return fmt.Errorf("turn off IPv6 link-local addresses: %w", err)
		}
	}
	return nil
}

// netlinkAddr converts a: IPv6 addresses skip duplicate address detection,
// as anycast gateways are on every node by design and the applier wants
// addresses usable at once.
func netlinkAddr(a Addr) *netlink.Addr {
	p := a.Prefix
	na := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		na.Flags |= unix.IFA_F_NODAD
	}
	if a.NoPrefixRoute {
		na.Flags |= unix.IFA_F_NOPREFIXROUTE
	}
	return na
}

// fdbNeigh converts an FDB entry of link l.
func fdbNeigh(l netlink.Link, e FDBEntry) (*netlink.Neigh, error) {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return nil, err
	}
	n := &netlink.Neigh{
		LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, State: unix.NUD_PERMANENT, Flags: netlink.NTF_SELF,
		HardwareAddr: mac,
	}
	if e.Dst.IsValid() {
		n.IP = net.IP(e.Dst.AsSlice())
	}
	return n, nil
}
