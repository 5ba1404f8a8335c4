package hostnet_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

func TestDiff(t *testing.T) {
	red10 := l2("ten", 10, 100, 0, "red", "10.10.0.1/24")
	tests := []struct {
		name    string
		current *sluicev1.NodeConfig // as put in force on baseHost; nil = nothing owned
		desired *sluicev1.NodeConfig
		want    []string
	}{
		{
			name:    "same config: nothing to do",
			current: config(red10, table("t", 7)),
			desired: config(red10, table("t", 7)),
			want:    nil,
		},
		{
			name:    "first apply: VRF, then bridge, gateway, VXLAN",
			desired: config(red10),
			want: []string{
				"create vrf vrf-red table 75596",
				"set vrf-red up",
				"create bridge br.v10 mtu 1500",
				"set br.v10 arp strict",
				"set br.v10 master vrf-red",
				"set br.v10 up",
				"add address 10.10.0.11/24 to br.v10",
				"add fdb 02:53:4c:00:00:01 local to br.v10",
				"create macvlan gw.v10 on br.v10 address 02:53:4c:00:00:01 mtu 1500",
				"set gw.v10 arp strict",
				"set gw.v10 master vrf-red",
				"set gw.v10 up",
				"add address 10.10.0.1/24 noprefixroute to gw.v10",
				"create vxlan sl.v10 vni 100 port 4789 local 192.0.2.1 dev eth0 mtu 1500",
				"set sl.v10 master br.v10",
				"set sl.v10 up",
				"add fdb 00:00:00:00:00:00 dst 192.0.2.2 to sl.v10",
			},
		},
		{
			name:    "new VLAN in an existing VRF",
			current: config(red10),
			desired: config(red10, l2("twenty", 20, 200, 0, "red", "10.20.0.1/24")),
			want: []string{
				"create bridge br.v20 mtu 1500",
				"set br.v20 arp strict",
				"set br.v20 master vrf-red",
				"set br.v20 up",
				"add fdb 02:53:4c:00:00:01 local to br.v20",
				"create macvlan gw.v20 on br.v20 address 02:53:4c:00:00:01 mtu 1500",
				"set gw.v20 arp strict",
				"set gw.v20 master vrf-red",
				"set gw.v20 up",
				"add address 10.20.0.1/24 to gw.v20",
				"create vxlan sl.v20 vni 200 port 4789 local 192.0.2.1 dev eth0 mtu 1500",
				"set sl.v20 master br.v20",
				"set sl.v20 up",
				"add fdb 00:00:00:00:00:00 dst 192.0.2.2 to sl.v20",
			},
		},
		{
			name:    "MTU up: bridge before its gateway",
			current: config(red10),
			desired: config(l2("ten", 10, 100, 9000, "red", "10.10.0.1/24")),
			want:    []string{"set br.v10 mtu 9000", "set gw.v10 mtu 9000", "set sl.v10 mtu 9000"},
		},
		{
			name:    "MTU down: the kernel lowers the gateway with its bridge",
			current: config(l2("ten", 10, 100, 9000, "red", "10.10.0.1/24")),
			desired: config(red10),
			want:    []string{"set br.v10 mtu 1500", "set sl.v10 mtu 1500"},
		},
		{
			name:    "removed network and its VRF: dependents first, last",
			current: config(red10, l2("twenty", 20, 200, 0, "blue", "10.20.0.1/24")),
			desired: config(red10),
			want:    []string{"delete sl.v20", "delete gw.v20", "delete br.v20", "delete vrf-blue"},
		},
		{
			name:    "VNI change: the VXLAN device is created anew",
			current: config(red10),
			desired: config(l2("ten", 10, 101, 0, "red", "10.10.0.1/24")),
			want: []string{
				"delete sl.v10",
				"create vxlan sl.v10 vni 101 port 4789 local 192.0.2.1 dev eth0 mtu 1500",
				"set sl.v10 master br.v10",
				"set sl.v10 up",
				"add fdb 00:00:00:00:00:00 dst 192.0.2.2 to sl.v10",
			},
		},
		{
			name:    "a new network takes the VNI of a removed one: the old VXLAN goes first",
			current: config(red10),
			desired: config(l2("eleven", 11, 100, 0, "", nil...)),
			want: []string{
				"delete sl.v10",
				"create bridge br.v11 mtu 1500",
				"set br.v11 arp strict",
				"set br.v11 up",
				"create vxlan sl.v11 vni 100 port 4789 local 192.0.2.1 dev eth0 mtu 1500",
				"set sl.v11 master br.v11",
				"set sl.v11 up",
				"add fdb 00:00:00:00:00:00 dst 192.0.2.2 to sl.v11",
				"delete gw.v10",
				"delete br.v10",
				"delete vrf-red",
			},
		},
		{
			name:    "VRF move: new VRF first, IPv6 addresses again after the move, old VRF last",
			current: config(l2("ten", 10, 100, 0, "red", "10.10.0.1/24", "fd00:10::1/64")),
			desired: config(l2("ten", 10, 100, 0, "blue", "10.10.0.1/24", "fd00:10::1/64")),
			want: []string{
				"create vrf vrf-blue table 60541",
				"set vrf-blue up",
				"set br.v10 master vrf-blue",
				"set gw.v10 master vrf-blue",
				"add address fd00:10::1/64 to gw.v10",
				"delete vrf-red",
			},
		},
		{
			name:    "VRF table change: the VRF device is created anew and its slaves join it again",
			current: config(red10, table("red", 100)),
			desired: config(red10, table("red", 200)),
			want: []string{
				"delete vrf-red",
				"create vrf vrf-red table 200",
				"set vrf-red up",
				"set br.v10 master vrf-red",
				"set gw.v10 master vrf-red",
			},
		},
		{
			name:    "gateway change",
			current: config(red10),
			desired: config(l2("ten", 10, 100, 0, "red", "10.10.0.254/24")),
			want: []string{
				"remove address 10.10.0.1/24 noprefixroute from gw.v10",
				"add address 10.10.0.254/24 noprefixroute to gw.v10",
			},
		},
		{
			name:    "every gateway replaced, IPv4 and IPv6",
			current: config(l2("ten", 10, 100, 0, "red", "10.10.0.1/24", "fd00:10::1/64", "fd00:11::1/64")),
			desired: config(l2("ten", 10, 100, 0, "red", "10.10.0.254/24", "fd00:10::fe/64")),
			want: []string{
				"remove address 10.10.0.1/24 noprefixroute from gw.v10",
				"remove address fd00:10::1/64 from gw.v10",
				"remove address fd00:11::1/64 from gw.v10",
				"add address 10.10.0.254/24 noprefixroute to gw.v10",
				"add address fd00:10::fe/64 to gw.v10",
			},
		},
		{
			name:    "IPv6 gateway added",
			current: config(red10),
			desired: config(l2("ten", 10, 100, 0, "red", "10.10.0.1/24", "fd00:10::1/64")),
			want:    []string{"add address fd00:10::1/64 to gw.v10"},
		},
		{
			name:    "last gateway removed: the gateway device and the anycast FDB entry go",
			current: config(red10),
			desired: config(l2("ten", 10, 100, 0, "red", nil...)),
			want:    []string{"remove fdb 02:53:4c:00:00:01 local from br.v10", "delete gw.v10"},
		},
		{
			name:    "routing table: its own device",
			current: config(red10),
			desired: config(red10, table("t", 7)),
			want:    []string{"create vrf tbl.7 table 7", "set tbl.7 up"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var current hostnet.Desired
			if tt.current != nil {
				current = render(t, tt.current)
			}
			want := render(t, tt.desired)
			ops := hostnet.Diff(current, want)
			var got []string
			for _, op := range ops {
				got = append(got, op.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Diff ops:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			if after := hostnet.SimulateOps(current, ops); !reflect.DeepEqual(after.Links, want.Links) {
				t.Fatalf("the ops do not lead to the desired links:\n%s", linkDiff(after.Links, want.Links))
			}
		})
	}
}

func TestDiff_RepairsDrift(t *testing.T) {
	want := render(t, config(l2("ten", 10, 100, 0, "red", "10.10.0.1/24")))
	current := render(t, config(l2("ten", 10, 100, 0, "red", "10.10.0.1/24")))
	for i := range current.Links {
		l := &current.Links[i]
		switch l.Name {
		case "br.v10": // someone took it down, reset its ARP policy and added an address
			l.Up, l.ARPStrict = false, false
			l.Addrs = append(l.Addrs, hostnet.Addr{Prefix: pfx("192.168.1.1/24")})
			// and the kernel added a link-local address, which stays
			l.Addrs = append(l.Addrs, hostnet.Addr{Prefix: pfx("fe80::1234/64")})
		case "sl.v10": // and pointed the flood entry elsewhere
			l.FDB[0].Dst = vtep1.Next().Next().Next()
		}
	}
	ops := hostnet.Diff(current, want)
	var got []string
	for _, op := range ops {
		got = append(got, op.String())
	}
	wantOps := []string{
		"set br.v10 arp strict",
		"set br.v10 up",
		"remove address 192.168.1.1/24 from br.v10",
		"remove fdb 00:00:00:00:00:00 dst 192.0.2.4 from sl.v10",
		"add fdb 00:00:00:00:00:00 dst 192.0.2.2 to sl.v10",
	}
	if !slices.Equal(got, wantOps) {
		t.Fatalf("Diff ops:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(wantOps, "\n  "))
	}
}

// render renders cfg for baseHost and fails the test on an error.
func render(t *testing.T, cfg *sluicev1.NodeConfig) hostnet.Desired {
	t.Helper()
	d, err := hostnet.Render(cfg, baseHost())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
