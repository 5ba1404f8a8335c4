package netcheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/sluicehq/sluice/services/agent"
)

// Uplink expects the interface Interface to exist, be administratively up
// and have carrier (IFF_LOWER_UP), with the operational state up — or
// unknown, which drivers that do not track it report. It reads the link
// through netlink.
type Uplink struct {
	Label     string // "" = "uplink: " + Interface
	Interface string
}

var _ agent.Check = Uplink{}

// Name returns Label or "uplink: " and the interface.
func (c Uplink) Name() string { return cmp.Or(c.Label, "uplink: "+c.Interface) }

// Validate reports a name Linux does not take for an interface.
func (c Uplink) Validate() error { return validIfName(c.Interface) }

// Run looks the link up.
func (c Uplink) Run(ctx context.Context, _ agent.CheckEnv) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	l, err := linkByName(c.Interface)
	if err != nil {
		err = fmt.Errorf("uplink %w", err)
		return err.Error(), err
	}
	a := l.Attrs()
	adminUp, carrier := isUp(a.Flags), a.RawFlags&iffLowerUp != 0
	out := fmt.Sprintf("uplink %s (%s): %s, %s, operstate %s, mtu %d",
		c.Interface, l.Type(), pick(adminUp, "up", "administratively down"), pick(carrier, "carrier", "no carrier"), a.OperState, a.MTU)
	switch {
	case !adminUp:
		err = fail(ErrLinkDown, "uplink %s is administratively down", c.Interface)
	case !carrier:
		err = fail(ErrNoCarrier, "uplink %s has no carrier (operstate %s)", c.Interface, a.OperState)
	case a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown:
		err = fail(ErrLinkDown, "uplink %s is up with carrier but its operstate is %s", c.Interface, a.OperState)
	}
	return out, err
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// validIfName reports a name Linux refuses for an interface (dev_valid_name
// in net/core/dev.c).
func validIfName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > 15:
		return fmt.Errorf("interface name %q is longer than 15 characters", name)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("interface name %q has a '/', ':' or a space", name)
	}
	return nil
}
