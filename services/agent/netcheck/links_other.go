//go:build !linux

package netcheck

import (
	"errors"

	"github.com/vishvananda/netlink"
)

var errNeedsLinux = errors.New("network checks read the host through netlink, which needs Linux")

func linkByName(string) (netlink.Link, error) { return nil, errNeedsLinux }

func linkAddrs(netlink.Link) ([]ifaceAddr, error) { return nil, errNeedsLinux }

func macvlansOn(netlink.Link) ([]netlink.Link, error) { return nil, errNeedsLinux }
