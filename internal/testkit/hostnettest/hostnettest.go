// Package hostnettest builds throwaway network namespaces for tests of the
// netlink applier: a fabric of node namespaces joined by veth pairs to a
// bridge in a fabric namespace (RequireNetAdmin, NewFabric), a way to run a
// function inside a namespace (RunIn) and ICMP echo between namespaces
// (Ping). Traffic stays inside the namespaces: nothing routes out. It needs
// root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and Linux.
package hostnettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/netnsutil"
)

// Fabric layout.
const (
	UplinkName   = "uplink" // each node's veth to the fabric
	UplinkMTU    = 9216     // jumbo, with room for a 9000 MTU overlay (VXLAN adds 50 bytes)
	FabricBridge = "fabric" // the bridge in the fabric namespace
)

// RequireNetAdmin skips the test, saying why, when this process cannot
// create network namespaces (it lacks CAP_NET_ADMIN / CAP_SYS_ADMIN). Other
// failures fail the test.
func RequireNetAdmin(t testing.TB) {
	t.Helper()
	err := netnsutil.OnLockedThread(func() error {
		ns, err := netns.New()
		if err != nil {
			return err
		}
		return ns.Close()
	})
	switch {
	case errors.Is(err, unix.EPERM):
		t.Skipf("needs CAP_NET_ADMIN to create network namespaces (run as root): %v", err)
	case err != nil:
		t.Fatalf("create a network namespace: %v", err)
	}
}

// EnvKernelVRFs, set to "required" (make test-kernel sets it in its guest,
// whose kernel has VRFs), makes RequireKernelVRFs fail a test instead of
// skipping it: there, a VRF test that does not run is a failure.
const EnvKernelVRFs = "SLUICE_KERNEL_VRFS"

// KernelVRFsRequired reports whether EnvKernelVRFs says VRF tests must run.
func KernelVRFsRequired() bool { return os.Getenv(EnvKernelVRFs) == "required" }

// RequireKernelVRFs skips t, saying why, when probe (hostnet.ProbeVRF's
// answer, or a VRF device's creation error) says the kernel has no VRF
// devices; with EnvKernelVRFs=required it fails t instead. This machine
// kind's kernel has no CONFIG_NET_VRF: make test-kernel runs these tests
// in Debian's kernel under qemu.
func RequireKernelVRFs(t testing.TB, probe error) {
	t.Helper()
	switch {
	case probe == nil:
	case KernelVRFsRequired():
		t.Fatalf("%s=required but the kernel cannot create VRF devices: %v", EnvKernelVRFs, probe)
	default:
		t.Skipf("this kernel cannot create VRF devices (CONFIG_NET_VRF): %v; make test-kernel runs this test in a kernel that can", probe)
	}
}

var seq atomic.Int64

// UniqueName returns a namespace name unique to this process and call:
// slt-<pid>-<n>-<suffix>.
func UniqueName(suffix string) string {
	return fmt.Sprintf("slt-%d-%d-%s", os.Getpid(), seq.Add(1), suffix)
}

// NewNamespace creates the named network namespace name (visible to
// "ip netns") with its loopback up, and deletes it in t.Cleanup. Both
// wait while a test holds QuietNamespaces.
func NewNamespace(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	unlock := lockNamespaces(t, unix.LOCK_SH)
	err := netnsutil.OnLockedThread(func() error {
		var err error
		ns, err = netns.NewNamed(name) // this thread is in ns from here on
		return err
	})
	unlock()
	if err != nil {
		t.Fatalf("create network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = ns.Close()
		unlock := lockNamespaces(t, unix.LOCK_SH)
		defer unlock()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	h := Handle(t, ns)
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("namespace %s: loopback up: %v", name, err)
	}
	return ns
}

// Handle returns a netlink handle on ns, closed in t.Cleanup.
func Handle(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// Fabric is a set of node namespaces, each with a veth pair to a bridge in
// a fabric namespace.
type Fabric struct {
	Fabric netns.NsHandle
	Nodes  []Node
}

// Node is one node namespace of a Fabric.
type Node struct {
	Name string         // the namespace's name, as "ip netns exec" takes it
	NS   netns.NsHandle // the namespace
	// VTEP is the node's underlay address: 192.0.2.<i>/24 (TEST-NET-1, i
	// counted from 1) on its UplinkName veth, which is up with UplinkMTU.
	VTEP netip.Addr
}

// NewFabric creates a fabric of n nodes (1-253). Everything goes in
// t.Cleanup: deleting the namespaces deletes their links.
func NewFabric(t testing.TB, n int) *Fabric {
	t.Helper()
	if n < 1 || n > 253 {
		t.Fatalf("NewFabric: %d nodes; want 1-253", n)
	}
	base := UniqueName("")
	f := &Fabric{Fabric: NewNamespace(t, base+"fabric")}
	fh := Handle(t, f.Fabric)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = FabricBridge, UplinkMTU
	br := &netlink.Bridge{LinkAttrs: attrs}
	if err := fh.LinkAdd(br); err != nil {
		t.Fatalf("fabric bridge: %v", err)
	}
	if err := fh.LinkSetUp(br); err != nil {
		t.Fatalf("fabric bridge up: %v", err)
	}
	for i := 1; i <= n; i++ {
		node := Node{Name: fmt.Sprintf("%sn%d", base, i), VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})}
		node.NS = NewNamespace(t, node.Name)
		if err := f.connect(fh, br, node, i); err != nil {
			t.Fatalf("fabric: node %s: %v", node.Name, err)
		}
		f.Nodes = append(f.Nodes, node)
	}
	return f
}

// connect joins node to the fabric bridge br with a veth pair: n<i> in the
// fabric, UplinkName in the node.
func (f *Fabric) connect(fh *netlink.Handle, br *netlink.Bridge, node Node, i int) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = fmt.Sprintf("n%d", i), UplinkMTU
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: UplinkName, PeerNamespace: netlink.NsFd(int(node.NS))}
	if err := fh.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	if err := fh.LinkSetMaster(veth, br); err != nil {
		return fmt.Errorf("veth into the fabric bridge: %w", err)
	}
	if err := fh.LinkSetUp(veth); err != nil {
		return fmt.Errorf("veth up: %w", err)
	}
	nh, err := netlink.NewHandleAt(node.NS, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer nh.Close()
	up, err := nh.LinkByName(UplinkName)
	if err != nil {
		return err
	}
	if err := nh.LinkSetMTU(up, UplinkMTU); err != nil {
		return fmt.Errorf("uplink mtu: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: node.VTEP.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := nh.AddrAdd(up, addr); err != nil {
		return fmt.Errorf("uplink address: %w", err)
	}
	if err := nh.LinkSetUp(up); err != nil {
		return fmt.Errorf("uplink up: %w", err)
	}
	return nil
}

// RunIn runs fn on an OS thread that is in the network namespace ns, and
// returns its error. Sockets fn opens stay in ns after it returns.
func RunIn(ns netns.NsHandle, fn func() error) error { return netnsutil.RunIn(ns, fn) }

var pingID atomic.Uint32

// Ping sends ICMP echo requests from src to dst inside ns, one every 200ms,
// until a reply comes (nil) or timeout passes (an error). It uses a raw
// socket, so it needs root, and works for IPv4 and IPv6.
func Ping(ns netns.NsHandle, src, dst netip.Addr, timeout time.Duration) error {
	return PingDev(ns, "", src, dst, timeout)
}

// PingDev is Ping with the socket bound to the device dev ("" = none): a
// VRF device to ping inside that VRF.
func PingDev(ns netns.NsHandle, dev string, src, dst netip.Addr, timeout time.Duration) error {
	network, proto := "ip4:icmp", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, proto = "ip6:ipv6-icmp", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		if dev == "" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), dev) })
		return errors.Join(err, serr)
	}}
	var c net.PacketConn
	err := RunIn(ns, func() error {
		var err error
		c, err = lc.ListenPacket(context.Background(), network, src.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w", dst, src, err)
	}
	defer func() { _ = c.Close() }()

	id := int((uint32(os.Getpid()) + pingID.Add(1)) & 0xffff)
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	var lastErr error
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("sluice")}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return err
		}
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			lastErr = err
		}
		wait := time.Now().Add(200 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		if err := c.SetReadDeadline(wait); err != nil {
			return err
		}
		for {
			// An ip4 socket's reads come without the IPv4 header.
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				break // this round's deadline: send again
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != replyType {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && peer.(*net.IPAddr).IP.Equal(dst.AsSlice()) {
				return nil
			}
		}
	}
	if lastErr != nil {
		return fmt.Errorf("ping %s from %s: no reply within %s (last send error: %w)", dst, src, timeout, lastErr)
	}
	return fmt.Errorf("ping %s from %s: no reply within %s", dst, src, timeout)
}

// QuietNamespaces keeps every test process of this machine from adding or
// deleting a named network namespace (NewNamespace) until release is
// called. FRR 8.4's zebra with --vrfwnetns watches /run/netns, and a
// namespace that appears while it starts can abort it
// ("thread_cancel_async(): assertion (master->owner != pthread_self())
// failed": make test, where packages run side by side, each making
// namespaces; FRR issue 19232: a deletion while it runs). frrtest holds
// it while such a zebra runs.
func QuietNamespaces(t testing.TB) (release func()) {
	t.Helper()
	return lockNamespaces(t, unix.LOCK_EX)
}

// lockNamespaces takes how (unix.LOCK_SH or LOCK_EX) on the machine's
// namespace lock file, shared by every process of the tests.
func lockNamespaces(t testing.TB, how int) func() {
	t.Helper()
	path := filepath.Join(os.TempDir(), "sluice-test-netns.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("open the namespace lock %s: %v", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	return func() { _ = f.Close() } // closing the file releases the lock
}
