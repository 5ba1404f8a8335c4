package hostnet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/netnsutil"
)

// ProbeVRF reports whether the kernel can create VRF devices: nil if so,
// an error matching ErrNoVRFSupport if it lacks CONFIG_NET_VRF, another
// error if it could not tell. It tries in a throwaway network namespace, so
// the host's namespace never sees a probe link. The agent calls it at start
// when its netlink settings have vrfs: kernel.
func ProbeVRF() error {
	return netnsutil.OnLockedThread(func() error {
		ns, err := netns.New() // unshare: this thread is in ns from here on
		if err != nil {
			return fmt.Errorf("probe VRF support: new network namespace: %w", err)
		}
		defer func() { _ = ns.Close() }() // the last reference: the kernel frees ns and the probe link
		return tryVRF(ns)
	})
}

// tryVRF creates a VRF device in ns.
func tryVRF(ns netns.NsHandle) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("probe VRF support: %w", err)
	}
	defer h.Close()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "probe"
	err = h.LinkAdd(&netlink.Vrf{LinkAttrs: attrs, Table: 1000})
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return ErrNoVRFSupport
	case err != nil:
		return fmt.Errorf("probe VRF support: %w", err)
	}
	return nil
}
