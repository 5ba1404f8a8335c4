package netcheck

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
)

// linkByName looks interface name up in the calling thread's network
// namespace; a missing one is an ErrLinkMissing.
func linkByName(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if _, ok := errors.AsType[netlink.LinkNotFoundError](err); ok {
			return nil, fail(ErrLinkMissing, "%s does not exist", name)
		}
		return nil, fmt.Errorf("look up %s: %w", name, err)
	}
	return l, nil
}

// linkAddrs returns the addresses of l, in the kernel's order.
func linkAddrs(l netlink.Link) ([]ifaceAddr, error) {
	for attempt := 1; ; attempt++ {
		list, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		// A dump interrupted by a concurrent change may be incomplete.
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the addresses of %s: %w", l.Attrs().Name, err)
		}
		out := make([]ifaceAddr, 0, len(list))
		for _, a := range list {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			ones, _ := a.Mask.Size()
			out = append(out, ifaceAddr{prefix: netip.PrefixFrom(ip.Unmap(), ones), flags: a.Flags})
		}
		return out, nil
	}
}

// macvlansOn returns the macvlan devices whose parent is l, sorted by name.
func macvlansOn(l netlink.Link) ([]netlink.Link, error) {
	for attempt := 1; ; attempt++ {
		all, err := netlink.LinkList()
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list links: %w", err)
		}
		var out []netlink.Link
		for _, c := range all {
			if c.Type() == "macvlan" && c.Attrs().ParentIndex == l.Attrs().Index {
				out = append(out, c)
			}
		}
		slices.SortFunc(out, func(a, b netlink.Link) int { return strings.Compare(a.Attrs().Name, b.Attrs().Name) })
		return out, nil
	}
}
