package frr

import (
	"strings"
	"testing"
)

func TestRouteMapDelay(t *testing.T) {
	tests := []struct {
		name, file string
		want       int
	}{
		{"none set: FRR's default", "hostname n1\nrouter bgp 65001\nexit\n", DefaultRouteMapDelay},
		{"set by the base", "hostname n1\nbgp route-map delay-timer 600\n!\nrouter bgp 65001\nexit\n", 600},
		{"set to 0", "bgp route-map delay-timer 0\n", 0},
		{"the last one counts", "bgp route-map delay-timer 30\nbgp route-map delay-timer 60\n", 60},
		{"reset by a later no", "bgp route-map delay-timer 30\nno bgp route-map delay-timer\n", DefaultRouteMapDelay},
		{"reset by a later no with its value", "bgp route-map delay-timer 30\nno bgp route-map delay-timer 30\n", DefaultRouteMapDelay},
		{"indented: not the global command", "router bgp 65001\n bgp route-map delay-timer 9\nexit\n", DefaultRouteMapDelay},
		{"out of FRR's range: ignored", "bgp route-map delay-timer 601\n", DefaultRouteMapDelay},
		{"not a number: ignored", "bgp route-map delay-timer soon\n", DefaultRouteMapDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routeMapDelay(tt.file); got != tt.want {
				t.Errorf("routeMapDelay = %d, want %d", got, tt.want)
			}
		})
	}
}

// The refresh must re-run `import vrf route-map` leaks, which no `clear
// bgp … soft` does: only firing bgpd's route-map update (the delay timer
// to 0, then back) does.
func TestRefreshCommands(t *testing.T) {
	tests := []struct {
		name  string
		vrfs  []string
		delay int
		want  []string
	}{
		{"no BGP instance: nothing", nil, DefaultRouteMapDelay, nil},
		{"kernel VRFs: the update fired, the timer back to the default, every VRF's neighbours cleared",
			[]string{"default", "vrf-blue", "vrf-red"}, DefaultRouteMapDelay,
			[]string{"configure terminal", "bgp route-map delay-timer 0", "bgp route-map delay-timer 5", "end",
				"clear bgp * soft", "clear bgp vrf vrf-blue * soft", "clear bgp vrf vrf-red * soft"}},
		{"the base's timer is put back", []string{"default"}, 600,
			[]string{"configure terminal", "bgp route-map delay-timer 0", "bgp route-map delay-timer 600", "end", "clear bgp * soft"}},
		{"timer 0: every change is processed at once, nothing to fire", []string{"default"}, 0,
			[]string{"clear bgp * soft"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := refreshCommands(tt.vrfs, tt.delay)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("refreshCommands =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
