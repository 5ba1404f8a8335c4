package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/internal/atomicfile"
)

// Applier puts configs in force in one network namespace through netlink.
// It implements the agent's Applier interface. Apply reconciles: it reads
// the owned links, renders the config, and performs Diff's ops, so applying
// the same config again writes nothing. Its methods are safe for
// concurrent use; applies run one at a time.
type Applier struct {
	host Host
	ns   netns.NsHandle

	mu         sync.Mutex
	lastWrites int
}

// New returns an Applier for the current network namespace. h must be
// valid.
func New(h Host) (*Applier, error) { return NewAt(netns.None(), h) }

// NewAt returns an Applier for the network namespace ns, which the caller
// keeps open while it uses the Applier. h must be valid.
func NewAt(ns netns.NsHandle, h Host) (*Applier, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &Applier{host: h, ns: ns}, nil
}

// LastWrites is how many netlink write requests the last Apply issued
// (its rollback included): 0 when the host already had the config.
func (a *Applier) LastWrites() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastWrites
}

// Owned reads the owned links of the namespace with everything the
// applier manages on them, in the shape Render returns (Routing empty): after
// a successful Apply its Links equal those of Render for the same config.
func (a *Applier) Owned() (Desired, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	x, closeAll, err := a.open()
	if err != nil {
		return Desired{}, err
	}
	defer closeAll()
	st, err := x.read(len(a.host.FloodPeers) > 0)
	return st.owned, err
}

// open returns an executor on the applier's namespace and a func that
// closes its sockets.
func (a *Applier) open() (*executor, func(), error) {
	h, err := netlink.NewHandleAt(a.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, nil, fmt.Errorf("open netlink: %w", err)
	}
	conf, err := openDevconf(a.ns)
	if err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("open netlink: %w", err)
	}
	return &executor{h: h, conf: conf}, func() { conf.Close(); h.Close() }, nil
}

// Apply makes the namespace's owned links what cfg's config means on this
// host, then writes the routing-daemon file if the host has one. Between
// ops it honours ctx. When an op fails or ctx ends, it undoes what this
// attempt did — links it created are deleted, links it deleted are created
// again, attributes it changed are put back, best effort — and returns the
// error, which names the op and its object. A nil config in cfg is the
// empty config: no owned links.
func (a *Applier) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastWrites = 0
	if cfg == nil {
		return errors.New("apply: no desired config")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	desired, err := Render(cfg.GetConfig(), a.host)
	if err != nil {
		return fmt.Errorf("render config: %w", err)
	}

	x, closeAll, err := a.open()
	if err != nil {
		return err
	}
	defer closeAll()
	defer func() { a.lastWrites = x.writes }()

	manageFlood := len(a.host.FloodPeers) > 0
	before, err := x.read(manageFlood)
	if err != nil {
		return err
	}
	for _, l := range desired.Links {
		if before.foreign[l.Name] {
			return fmt.Errorf("create %s: %w: remove or rename the host's %s, or give it the alias %q to hand it to sluice",
				l.Name, ErrNameTaken, l.Name, Alias)
		}
		// Two VRF devices on one table share its routes: the tenants
		// would not be isolated from the host's own VRF.
		if other, ok := before.foreignTables[l.Table]; ok && l.Kind == KindVRF {
			return fmt.Errorf("create %s on kernel table %d: %w: the host's VRF %s is on that table; give the VRF another table (a RoutingTable intent, or the agent's --vrf-table-base)",
				l.Name, l.Table, ErrTableTaken, other)
		}
	}

	err = x.performAll(ctx, Diff(before.owned, desired))
	if err == nil && a.host.RoutingDaemonFile != "" {
		err = writeIfChanged(a.host.RoutingDaemonFile, desired.Routing.Marshal())
	}
	if err != nil {
		if rerr := x.rollback(before.owned, manageFlood); rerr != nil {
			return fmt.Errorf("%w; undoing this attempt failed too: %w", err, rerr)
		}
		return err
	}
	return nil
}

// performAll performs ops in order and stops at the first error or when
// ctx ends.
func (x *executor) performAll(ctx context.Context, ops []Op) error {
	for _, op := range ops {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before %s: %w", op, err)
		}
		if err := x.perform(op); err != nil {
			return err
		}
	}
	return nil
}

// rollback puts the owned links back as they were before (as read then):
// it diffs the host's state now against it and performs every op it can.
func (x *executor) rollback(before Desired, manageFlood bool) error {
	if x.writes == 0 {
		return nil
	}
	now, err := x.read(manageFlood)
	if err != nil {
		return err
	}
	var errs []error
	for _, op := range Diff(now.owned, before) {
		if err := x.perform(op); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeIfChanged replaces the file at path with data, atomically, unless
// it holds data already.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write routing daemon file %s: %w", path, err)
	}
	if err := atomicfile.Write(path, data, 0o644); err != nil {
		return fmt.Errorf("write routing daemon file %s: %w", path, err)
	}
	return nil
}
