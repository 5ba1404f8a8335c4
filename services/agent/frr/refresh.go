package frr

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultRouteMapDelay is bgpd's route-map delay timer when the config
// sets none (`bgp route-map delay-timer`, seconds; FRR 8.4).
const DefaultRouteMapDelay = 5

// refresh puts the policies of the file just reloaded in force in every
// BGP instance now, then waits Settle (or ctx's end).
//
// bgpd batches route-map and prefix-list changes: it re-runs them only
// when its route-map delay timer fires, DefaultRouteMapDelay seconds after
// the last change, both for its neighbours and for the routes `import vrf
// route-map` leaks into a VRF. `clear bgp * soft` covers the neighbours
// alone (a route refresh from each): it does not re-run an import map, so
// a VRF that no longer imports a prefix keeps it until the timer (measured
// in the guest kernel of make test-kernel: 600 s with the timer at 600).
// Setting the timer to 0 while an update is pending fires that update at
// once, with the whole new config; setting it back to the file's value
// leaves the running config as the file says. So refresh runs, in one
// vtysh call, the timer at 0 and back, then the clears.
func (a *Applier) refresh(ctx context.Context, file string) error {
	s, err := a.cfg.FRR.BGPSummary(ctx)
	if err != nil {
		return fmt.Errorf("after the reload: %w", err)
	}
	if cmds := refreshCommands(s.VRFs, routeMapDelay(file)); len(cmds) > 0 {
		if _, err := a.cfg.FRR.Run(ctx, cmds...); err != nil {
			return fmt.Errorf("after the reload, have BGP apply the new policy: %w", err)
		}
	}
	t := time.NewTimer(a.cfg.Settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting %s for BGP to settle after the reload: %w", a.cfg.FRR, a.cfg.Settle, context.Cause(ctx))
	case <-t.C:
	}
	return nil
}

// refreshCommands are the vtysh commands that put a reloaded config's
// policies in force in the BGP instances of vrfs, whose config sets the
// route-map delay timer to delay seconds: the pending route-map update
// fired (the timer to 0 and back to delay; nothing is pending to fire
// when delay is 0, which processes every change at once), then a soft
// clear of every VRF's neighbours. No BGP instance: none.
func refreshCommands(vrfs []string, delay int) []string {
	if len(vrfs) == 0 {
		return nil
	}
	var cmds []string
	if delay != 0 {
		cmds = append(cmds, "configure terminal", "bgp route-map delay-timer 0", "bgp route-map delay-timer "+strconv.Itoa(delay), "end")
	}
	for _, v := range vrfs {
		if v == DefaultVRF {
			cmds = append(cmds, "clear bgp * soft")
		} else {
			cmds = append(cmds, "clear bgp vrf "+v+" * soft")
		}
	}
	return cmds
}

// routeMapDelay is the route-map delay timer file sets: its last
// top-level `bgp route-map delay-timer N` (0-600), else, or after a later
// `no bgp route-map delay-timer`, DefaultRouteMapDelay.
func routeMapDelay(file string) int {
	delay := DefaultRouteMapDelay
	for _, l := range splitLines(file) {
		if strings.HasPrefix(l, " ") {
			continue // inside a section: not the global command
		}
		f := strings.Fields(l)
		switch {
		case len(f) >= 4 && f[0] == "no" && f[1] == "bgp" && f[2] == "route-map" && f[3] == "delay-timer":
			delay = DefaultRouteMapDelay
		case len(f) == 4 && f[0] == "bgp" && f[1] == "route-map" && f[2] == "delay-timer":
			if n, err := strconv.Atoi(f[3]); err == nil && n >= 0 && n <= 600 {
				delay = n
			}
		}
	}
	return delay
}
