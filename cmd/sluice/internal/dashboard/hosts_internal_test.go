package dashboard

import (
	"net"
	"testing"
)

// TestHosts_Allowed: which Host a connection that arrived at an address
// may name. On a wildcard listener a connection arrives at one of the
// machine's interface addresses, and that address (with the port) is the
// only IP literal besides loopback it may name.
func TestHosts_Allowed(t *testing.T) {
	hs, err := parseHosts("--allowed-host", "dash.internal:3100", []string{"proxy.example.com", "pinned.example.com:443", "[fd00::9]:3100"})
	if err != nil {
		t.Fatal(err)
	}
	v4 := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 3100}
	v6 := &net.TCPAddr{IP: net.ParseIP("fd00::5"), Port: 3100}
	lo := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 3100}
	on80 := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 80}
	for _, c := range []struct {
		host  string
		local net.Addr
		want  bool
	}{
		{"10.0.0.5:3100", v4, true},            // the address reached, with its port
		{"10.0.0.5:3101", v4, false},           // another port
		{"10.0.0.6:3100", v4, false},           // another machine's address
		{"10.0.0.5:3100", lo, false},           // not the address this connection reached
		{"[fd00::5]:3100", v6, true},           // IPv6
		{"[FD00::5]:3100", v6, true},           // case
		{"[fd00::6]:3100", v6, false},          // another IPv6 address
		{"localhost:3100", v4, true},           // a tunnel or a published port on loopback
		{"127.0.0.1:3100", v4, true},           //
		{"[::1]:3100", lo, true},               //
		{"127.9.9.9:3100", lo, true},           // every loopback literal
		{"localhost:3101", lo, false},          // another port
		{"localhost", lo, false},               // port 80, not this one
		{"localhost", on80, true},              // a browser leaves out port 80
		{"dash.internal:3100", v4, true},       // the name --addr gave
		{"dash.internal:3101", v4, false},      //
		{"proxy.example.com", v4, true},        // --allowed-host NAME: any port
		{"proxy.example.com:8443", nil, true},  // the rules need no local address
		{"PROXY.example.com:8443", nil, true},  //
		{"pinned.example.com:443", v4, true},   // NAME:PORT: that port
		{"pinned.example.com", v4, false},      //
		{"pinned.example.com:8443", v4, false}, //
		{"[fd00::9]:3100", nil, true},          //
		{"[fd00::9]:3101", nil, false},         //
		{"evil.example:3100", v4, false},       // a rebound name
		{"evil.example:3100", lo, false},       //
		{"localhost.evil.example:3100", lo, false},
		{"127.0.0.1.evil.example:3100", lo, false},
		{"127.0.0.1:3100", nil, false}, // no local address: only the rules
		{"", lo, false},                // no Host (HTTP/1.0)
	} {
		if got := hs.allowed(c.host, c.local); got != c.want {
			t.Errorf("Host %q on a connection to %v: allowed %v, want %v", c.host, c.local, got, c.want)
		}
	}
}
