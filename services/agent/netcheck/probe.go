package netcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sluicehq/sluice/services/agent/internal/findings"
)

// pingJob is the pings one socket sends: to dsts from src (invalid: the
// kernel chooses), bound to dev.
type pingJob struct {
	v6     bool
	src    netip.Addr
	dev    string
	dsts   []netip.Addr
	labels []string // dsts as the output names them

	p       *pinger
	openErr error
	res     []echoResult
}

// open opens j's socket in the calling thread's network namespace.
func (j *pingJob) open(ctx context.Context) {
	j.p, j.openErr = openPinger(ctx, j.v6, j.src, j.dev)
}

// run sends j's pings; any goroutine may run it once j is open.
func (j *pingJob) run(ctx context.Context, wait time.Duration) {
	if j.p != nil {
		j.res = j.p.echo(ctx, j.dsts, wait)
	}
}

// report adds to r a line per destination, each starting with prefix:
// "vlan 100 (tenant-a): 10.100.0.12 from 10.100.0.11: reply in 85µs".
func (j *pingJob) report(r *report, prefix string) {
	for i := range j.dsts {
		j.reportOne(r, i, prefix)
	}
}

// reportOne adds the line of destination i to r.
func (j *pingJob) reportOne(r *report, i int, prefix string) {
	what := prefix + j.labels[i]
	if j.src.IsValid() {
		what += " from " + j.src.String()
	}
	err := j.openErr
	if err == nil {
		err = j.res[i].err
	}
	if err != nil {
		r.Fail(fmt.Errorf("%s: %w", what, err))
		return
	}
	r.Line("%s: reply in %s", what, j.res[i].rtt.Round(time.Microsecond))
}

// report is a check's evidence and failures (findings.Report).
type report = findings.Report

func isUp(f net.Flags) bool { return f&net.FlagUp != 0 }

func joinAddrs(as []netip.Addr, sep string) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, sep)
}

// validTarget reports an address that is not a unicast address one can
// ping without naming an interface.
func validTarget(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("no address")
	case a.Zone() != "":
		return fmt.Errorf("%s: an address with a zone is not supported", a)
	case a.Is4In6():
		return fmt.Errorf("%s: write an IPv4 address as such (%s)", a, a.Unmap())
	case a.IsUnspecified(), a.IsMulticast(), a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is not a unicast address", a)
	case a.IsLinkLocalUnicast():
		return fmt.Errorf("%s is link-local: it needs an interface; ping an address of the network instead", a)
	}
	return nil
}
