package frr

import (
	"reflect"
	"testing"
)

// frr-reload.py 8.4.4's output, recorded on this machine kind.
const (
	// --test of a file that differs in its hostname and ipv6 forwarding.
	diffTopLevel = `
Lines To Delete
===============
no hostname vm
ipv6 forwarding

Lines To Add
============
hostname fa
`
	// --test of a file adding a route map on a neighbour: each entry is
	// printed with its contexts, outermost at column 0.
	diffNested = `
Lines To Add
============
ip prefix-list from-n1 seq 5 deny 203.0.113.0/24
route-map from-n1 permit 10
route-map from-n1 permit 10
 match ip address prefix-list from-n1
router bgp 65002
 address-family ipv4 unicast
router bgp 65002
 address-family ipv4 unicast
  neighbor 192.0.2.1 route-map from-n1 in
`
	// --reload --stdout of a file vtysh refuses: its log (stderr).
	refusedLog = "2026-12-01 21:37:18,349  INFO: Called via \"Namespace(input=None, reload=True, test=False)\"\n" +
		"2026-12-01 21:37:18,349  INFO: Loading Config object from file bad.conf\n" +
		"2026-12-01 21:37:18,398 \x1b[91m  ERROR\x1b[0m: vtysh failed to process new configuration: vtysh (mark file) exited with status 2:\n" +
		"b'line 8: % Unknown command:  neighbor 10.9.0.2 route-map X bogus\\n\\n'\n" +
		"2026-12-01 21:37:18,399  INFO: Loading Config object from vtysh show running\n" +
		"2026-12-01 21:37:18,471  INFO: \"frr version 8.4.4\" cannot be removed\n"
	// --reload (without --stdout) of the same file: the error on stdout.
	refusedStdout = "vtysh failed to process new configuration: vtysh (mark file) exited with status 2:\n" +
		"b'line 8: % Unknown command:  neighbor 10.9.0.2 route-map X bogus\\n\\n'\n"
	// an apply that failed half-way: frr-reload only warns. Not
	// recorded: built from frr-reload.py's source (log.warning of the
	// VtyshException of vtysh -f).
	halfApplied = "2026-12-01 21:40:01,100  INFO: Executed \"no router bgp 65001\"\n" +
		"2026-12-01 21:40:01,150  INFO: /var/run/frr/reload-ZN88KZ.txt content\n" +
		"['router bgp 65001\\n',\n" +
		" ' neighbor 192.0.2.2 remote-as 65002\\n']\n" +
		"2026-12-01 21:40:01,200 \x1b[91mWARNING\x1b[0m: frr-reload.py failed due to\n" +
		"('vtysh (exec file) exited with status 13',)\n"
)

func TestParseDiff(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want ConfigDiff
	}{
		{"nothing to change", "", ConfigDiff{}},
		{"top-level lines", diffTopLevel, ConfigDiff{Delete: []string{"no hostname vm", "ipv6 forwarding"}, Add: []string{"hostname fa"}}},
		{"lines in contexts", diffNested, ConfigDiff{Add: []string{
			"ip prefix-list from-n1 seq 5 deny 203.0.113.0/24",
			"route-map from-n1 permit 10",
			"route-map from-n1 permit 10\n match ip address prefix-list from-n1",
			"router bgp 65002\n address-family ipv4 unicast",
			"router bgp 65002\n address-family ipv4 unicast\n  neighbor 192.0.2.1 route-map from-n1 in",
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseDiff(tt.out)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
			if got.Empty() != (len(tt.want.Add)+len(tt.want.Delete) == 0) {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
	if got, want := parseDiff(diffTopLevel).String(), "- no hostname vm\n- ipv6 forwarding\n+ hostname fa"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestReloadErrors(t *testing.T) {
	const refused = "vtysh failed to process new configuration: vtysh (mark file) exited with status 2: line 8: % Unknown command: neighbor 10.9.0.2 route-map X bogus"
	tests := []struct {
		name, out, want string
	}{
		{"a refused file, from the log", refusedLog, refused},
		{"a refused file, from stdout", refusedStdout, refused},
		{"both: said once", refusedStdout + refusedLog, refused},
		{"a half-applied reload's warning", halfApplied, "frr-reload.py failed due to ('vtysh (exec file) exited with status 13',)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reloadErrors(tt.out); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
