package frr

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// The markers around sluice's block in the merged file. FRR reads both as
// comments. Merge finds them by these prefixes, so their explanations may
// change without losing an older file's block.
const (
	BeginMarker = "! sluice: begin -- rendered by the sluice agent from this node's config; edits up to the end marker are replaced on every apply"
	EndMarker   = "! sluice: end"

	beginPrefix = "! sluice: begin"
	endPrefix   = "! sluice: end"
)

// Merge returns the operator's base file with the rendered block (Render's
// output) between the markers: where an earlier block stood in base (so a
// merged file may serve as the base of the next merge), else at the end,
// before a final `end`. Every line of base outside an earlier block is kept
// as it is, in its place; lines inside one are sluice's and are replaced.
//
// A base that defines what sluice renders is refused, each conflict an
// error matching ErrBaseConflict that names the base file's line: a prefix
// list, route map or other named list whose name starts with NamePrefix, a
// VRF with the prefix of sluice's VRF devices (hostnet.PrefixVRF), a
// `router bgp` of such a VRF or of one the rendered block has a BGP
// instance for (the default VRF's included), and
// markers that do not pair up. Merge is pure; Merge(Merge(b, r), r) equals
// Merge(b, r).
func Merge(base, rendered string) (string, error) {
	lines := splitLines(base)
	begin, end, err := findBlock(lines)
	if err != nil {
		return "", err
	}
	instances := bgpInstances(splitLines(rendered))

	var errs []error
	for i, l := range lines {
		if begin >= 0 && i >= begin && i <= end {
			continue
		}
		if why := conflict(l, instances); why != "" {
			errs = append(errs, fmt.Errorf("%w: base line %d %q %s; remove or rename it in the base file", ErrBaseConflict, i+1, strings.TrimSpace(l), why))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}

	block := make([]string, 0, 2+strings.Count(rendered, "\n")+1)
	block = append(block, BeginMarker)
	block = append(block, splitLines(rendered)...)
	block = append(block, EndMarker)

	var out []string
	switch {
	case begin >= 0:
		out = slices.Concat(lines[:begin], block, lines[end+1:])
	default:
		at := len(lines)
		// Before a final `end` (as `show running-config` prints one), after
		// any blank lines and comments that follow it.
		for i := len(lines) - 1; i >= 0; i-- {
			t := strings.TrimSpace(lines[i])
			if t == "end" {
				at = i
				break
			}
			if t != "" && !isComment(t) {
				break
			}
		}
		out = slices.Concat(lines[:at], block, lines[at:])
	}
	return strings.Join(out, "\n") + "\n", nil
}

// splitLines splits s into its lines, without their newlines; a final
// newline ends the last line rather than starting an empty one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func isComment(trimmed string) bool {
	return strings.HasPrefix(trimmed, "!") || strings.HasPrefix(trimmed, "#")
}

// findBlock returns the indexes of the begin and end markers in lines, -1
// and -1 when there are none.
func findBlock(lines []string) (begin, end int, err error) {
	begin, end = -1, -1
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, beginPrefix):
			if begin >= 0 {
				return 0, 0, fmt.Errorf("%w: base line %d is a second %q (the first is line %d); keep one sluice block", ErrBaseConflict, i+1, beginPrefix, begin+1)
			}
			begin = i
		case strings.HasPrefix(t, endPrefix):
			if begin < 0 || end >= 0 {
				return 0, 0, fmt.Errorf("%w: base line %d %q ends no sluice block; remove it", ErrBaseConflict, i+1, endPrefix)
			}
			end = i
		}
	}
	if begin >= 0 && end < 0 {
		return 0, 0, fmt.Errorf("%w: base line %d %q has no %q after it; restore the end marker or remove the block", ErrBaseConflict, begin+1, beginPrefix, endPrefix)
	}
	return begin, end, nil
}

// bgpInstances returns the VRFs of the `router bgp` instances in lines.
func bgpInstances(lines []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range lines {
		if v, ok := routerBGPVRF(strings.Fields(l)); ok {
			out[v] = true
		}
	}
	return out
}

// routerBGPVRF returns the VRF of a `router bgp ASN [vrf NAME|view NAME]`
// line: "default" without one.
func routerBGPVRF(f []string) (string, bool) {
	if len(f) < 2 || f[0] != "router" || f[1] != "bgp" {
		return "", false
	}
	if len(f) >= 5 && f[3] == "vrf" {
		return f[4], true
	}
	if len(f) >= 5 && f[3] == "view" {
		return "view " + f[4], true // a view is no VRF sluice renders
	}
	return defaultVRF, true
}

// namedLists are the commands that define a named object, and which field
// holds the name.
var namedLists = []struct {
	words []string
	name  int
}{
	{[]string{"ip", "prefix-list"}, 2},
	{[]string{"ipv6", "prefix-list"}, 2},
	{[]string{"route-map"}, 1},
	{[]string{"access-list"}, 1},
	{[]string{"ipv6", "access-list"}, 2},
	{[]string{"bgp", "community-list", "standard"}, 3},
	{[]string{"bgp", "community-list", "expanded"}, 3},
	{[]string{"bgp", "community-list"}, 2},
	{[]string{"bgp", "large-community-list", "standard"}, 3},
	{[]string{"bgp", "large-community-list", "expanded"}, 3},
	{[]string{"bgp", "large-community-list"}, 2},
	{[]string{"bgp", "extcommunity-list", "standard"}, 3},
	{[]string{"bgp", "extcommunity-list", "expanded"}, 3},
	{[]string{"bgp", "extcommunity-list"}, 2},
	{[]string{"bgp", "as-path", "access-list"}, 3},
}

// conflict says why a base line defines what sluice renders, "" when it
// does not. References (a neighbour's `route-map sluice_… in`) are fine.
func conflict(line string, instances map[string]bool) string {
	t := strings.TrimSpace(line)
	if t == "" || isComment(t) {
		return ""
	}
	f := strings.Fields(t)
	for _, nl := range namedLists {
		if len(f) > nl.name && slices.Equal(f[:len(nl.words)], nl.words) && strings.HasPrefix(f[nl.name], NamePrefix) {
			return fmt.Sprintf("defines %s, a name with sluice's prefix %q", f[nl.name], NamePrefix)
		}
	}
	if len(f) >= 2 && f[0] == "vrf" && strings.HasPrefix(f[1], hostnet.PrefixVRF) {
		return fmt.Sprintf("configures VRF %s, which has the prefix %q of sluice's VRF devices", f[1], hostnet.PrefixVRF)
	}
	if v, ok := routerBGPVRF(f); ok {
		switch {
		case instances[v]:
			return fmt.Sprintf("is a BGP instance of VRF %s, which sluice renders (settings asn, neighbors, clusterVRF)", v)
		case strings.HasPrefix(v, hostnet.PrefixVRF):
			return fmt.Sprintf("is a BGP instance of VRF %s, which has the prefix %q of sluice's VRF devices", v, hostnet.PrefixVRF)
		}
	}
	return ""
}
