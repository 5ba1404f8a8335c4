package hostnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostState is what the applier reads from its namespace.
type hostState struct {
	owned Desired
	// foreign are the names of the links that are not owned.
	foreign map[string]bool
	// foreignTables are the kernel tables of the VRF devices that are not
	// owned, to the device's name.
	foreignTables map[uint32]string
}

// read returns the owned links in the namespace with everything the
// applier manages on them, in the shape Render gives (unmanaged fields
// zero), and the names of all other links. IPv6 link-local addresses are
// left out: the kernel adds them. The all-zeros flood entries of VXLAN
// devices are read only with manageFlood, else a routing daemon owns the
// VXLAN FDB.
func (x *executor) read(manageFlood bool) (hostState, error) {
	links, err := retryDump(x.h.LinkList)
	if err != nil {
		return hostState{}, fmt.Errorf("list links: %w", err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return x.h.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return hostState{}, fmt.Errorf("list addresses: %w", err)
	}
	fdb, err := retryDump(func() ([]netlink.Neigh, error) { return x.h.NeighList(0, unix.AF_BRIDGE) })
	if err != nil {
		return hostState{}, fmt.Errorf("list FDB entries: %w", err)
	}
	strict, err := x.conf.strictARP()
	if err != nil {
		return hostState{}, fmt.Errorf("read ARP settings: %w", err)
	}

	names := map[int]string{}
	macs := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
		macs[l.Attrs().Index] = l.Attrs().HardwareAddr.String()
	}
	st := hostState{foreign: map[string]bool{}, foreignTables: map[uint32]string{}}
	var mine []Link
	pos := map[int]int{} // link index → position in mine
	for _, ln := range links {
		a := ln.Attrs()
		if !hasOwnedPrefix(a.Name) || a.Alias != Alias {
			st.foreign[a.Name] = true
			if v, ok := ln.(*netlink.Vrf); ok {
				st.foreignTables[v.Table] = a.Name
			}
			continue
		}
		l := Link{Name: a.Name, Kind: Kind(ln.Type()), Master: names[a.MasterIndex], Up: a.Flags&net.FlagUp != 0}
		switch v := ln.(type) {
		case *netlink.Vxlan:
			l.VNI, l.Port, l.Dev, l.Learning = uint32(v.VxlanId), uint16(v.Port), names[v.VtepDevIndex], v.Learning
			l.Local = addrFromIP(v.SrcAddr)
			l.MTU = a.MTU
		case *netlink.Bridge:
			l.MTU, l.ARPStrict = a.MTU, strict[a.Index]
		case *netlink.Macvlan:
			l.Parent, l.MTU, l.HardwareAddr, l.ARPStrict = names[a.ParentIndex], a.MTU, a.HardwareAddr.String(), strict[a.Index]
		case *netlink.Vrf:
			l.Table = v.Table
		}
		pos[a.Index] = len(mine)
		mine = append(mine, l)
	}
	byIndex := map[int]*Link{}
	for index, i := range pos {
		byIndex[index] = &mine[i]
	}

	for _, a := range addrs {
		l := byIndex[a.LinkIndex]
		if l == nil || a.IPNet == nil {
			continue
		}
		ip := addrFromIP(a.IP)
		if ip.Is6() && ip.IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		l.Addrs = append(l.Addrs, Addr{Prefix: netip.PrefixFrom(ip, bits), NoPrefixRoute: a.Flags&unix.IFA_F_NOPREFIXROUTE != 0})
	}

	for _, n := range fdb {
		l := byIndex[n.LinkIndex]
		if l == nil {
			continue
		}
		mac := n.HardwareAddr.String()
		switch {
		case l.Kind == KindVXLAN && manageFlood && n.Flags&netlink.NTF_SELF != 0 && mac == floodMAC && n.IP != nil:
			l.FDB = append(l.FDB, FDBEntry{MAC: mac, Dst: addrFromIP(n.IP)})
		case l.Kind == KindBridge && n.Flags&netlink.NTF_SELF == 0 && n.State&unix.NUD_PERMANENT != 0 && n.Vlan == 0 &&
			mac != macs[n.LinkIndex]: // the bridge's own address is a local entry too: the kernel's
			l.FDB = append(l.FDB, FDBEntry{MAC: mac})
		}
	}

	st.owned = Desired{Links: mine}
	st.owned.normalize()
	return st, nil
}

// addrFromIP converts ip, unmapping IPv4-in-IPv6; nil gives the invalid Addr.
func addrFromIP(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// retryDump runs a netlink dump again when the kernel reports that the
// objects changed while it ran, a few times.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	for attempt := 1; ; attempt++ {
		out, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == 3 {
			return out, err
		}
	}
}
