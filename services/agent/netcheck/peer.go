package netcheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// Peer proves a peer is reachable: an ICMP echo to Addr or, where ICMP is
// not allowed, a TCP connect to TCP (exactly one of the two is set). With
// VRF set it sends inside that VRF, bound to its device
// (hostnet.VRFName(VRF)), which must exist.
type Peer struct {
	Label string         // "" = "peer: " + the peer in ParsePeer's form
	Addr  netip.Addr     // ping this address, or
	TCP   netip.AddrPort // connect to this one: connected is healthy, refused is not
	VRF   string         // "" = the default VRF
	// Wait is how long a ping waits for its reply (default DefaultWait); a
	// TCP connect may take the check's timeout.
	Wait time.Duration
}

var _ agent.Check = Peer{}

// ParsePeer reads a peer as the --check-peer flag takes it:
//
//	ADDR                  ICMP echo to ADDR
//	ADDR%VRF              ICMP echo inside VRF
//	tcp://ADDR:PORT       TCP connect (an IPv6 ADDR in brackets: tcp://[fd00::5]:179)
//	tcp://ADDR:PORT%VRF   TCP connect inside VRF
//
// ADDR is an IP address (no host names: a check should not depend on DNS).
func ParsePeer(s string) (Peer, error) {
	rest, isTCP := strings.CutPrefix(s, "tcp://")
	if scheme, _, ok := strings.Cut(rest, "://"); ok {
		return Peer{}, fmt.Errorf("%q: unknown scheme %q, want tcp://ADDR:PORT or an address to ping", s, scheme)
	}
	var p Peer
	// A '%' inside brackets is an IPv6 zone, which validTarget refuses.
	if i := strings.LastIndex(rest, "%"); i > strings.LastIndex(rest, "]") {
		rest, p.VRF = rest[:i], rest[i+1:]
		if p.VRF == "" {
			return Peer{}, fmt.Errorf("%q: empty VRF after %%", s)
		}
	}
	if isTCP {
		ap, err := netip.ParseAddrPort(rest)
		if err != nil {
			return Peer{}, fmt.Errorf("%q: want tcp://ADDR:PORT with an IP address (IPv6 in brackets): %w", s, err)
		}
		p.TCP = ap
	} else {
		a, err := netip.ParseAddr(rest)
		if err != nil {
			return Peer{}, fmt.Errorf("%q: want an IP address to ping, or tcp://ADDR:PORT: %w", s, err)
		}
		p.Addr = a
	}
	return p, p.Validate()
}

// String is p in ParsePeer's form.
func (c Peer) String() string {
	s := c.Addr.String()
	if c.TCP.IsValid() {
		s = "tcp://" + c.TCP.String()
	}
	if c.VRF != "" {
		s += "%" + c.VRF
	}
	return s
}

// Name returns Label or "peer: " and the peer: "peer: tcp://10.0.0.5:179%red".
func (c Peer) Name() string { return cmp.Or(c.Label, "peer: "+c.String()) }

// Validate reports a peer that is not exactly one unicast address one can
// reach without naming an interface, a TCP port 0, a VRF that is not a
// valid name and a negative wait.
func (c Peer) Validate() error {
	switch {
	case c.Addr.IsValid() == c.TCP.IsValid():
		return errors.New("set exactly one of an address to ping and a TCP address")
	case c.Wait < 0:
		return fmt.Errorf("wait %s is negative", c.Wait)
	case c.TCP.IsValid() && c.TCP.Port() == 0:
		return fmt.Errorf("tcp %s: port 0", c.TCP)
	}
	a := c.Addr
	if c.TCP.IsValid() {
		a = c.TCP.Addr()
	}
	if err := validTarget(a); err != nil {
		return fmt.Errorf("peer %w", err)
	}
	if c.VRF != "" {
		if err := contract.ValidName(c.VRF); err != nil {
			return fmt.Errorf("vrf: %w", err)
		}
	}
	return nil
}

// Run pings or connects to the peer.
func (c Peer) Run(ctx context.Context, _ agent.CheckEnv) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var dev, where string
	if c.VRF != "" {
		dev = hostnet.VRFName(c.VRF)
		l, err := linkByName(dev)
		if err == nil && l.Type() != "vrf" {
			err = fail(ErrLinkMissing, "%s is a %s device, not a VRF", dev, l.Type())
		}
		if err != nil {
			err = fmt.Errorf("vrf %s: device %w", c.VRF, err)
			return err.Error(), err
		}
		where = fmt.Sprintf(" in vrf %s (%s)", c.VRF, dev)
	}
	if c.TCP.IsValid() {
		return c.connect(ctx, dev, where)
	}
	j := &pingJob{v6: c.Addr.Is6(), dev: dev, dsts: []netip.Addr{c.Addr}, labels: []string{c.Addr.String() + where}}
	j.open(ctx)
	j.run(ctx, cmp.Or(c.Wait, DefaultWait))
	var r report
	j.report(&r, "")
	return r.Result()
}

// connect opens and closes a TCP connection to the peer, bound to dev when
// it is set.
func (c Peer) connect(ctx context.Context, dev, where string) (string, error) {
	var d net.Dialer
	if dev != "" {
		d.Control = bindToDevice(dev)
	}
	conn, err := d.DialContext(ctx, "tcp", c.TCP.String())
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			err = fail(ErrUnreachable, "%s%s refused the connection: the host answered, but nothing listens on port %d", c.TCP, where, c.TCP.Port())
		} else {
			err = fmt.Errorf("connect to %s%s: %w", c.TCP, where, err)
		}
		return err.Error(), err
	}
	out := fmt.Sprintf("connected to %s%s from %s", c.TCP, where, conn.LocalAddr())
	_ = conn.Close()
	return out, nil
}
