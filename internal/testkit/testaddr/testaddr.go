//go:build unix

// Package testaddr gives tests loopback addresses that stay theirs: a port
// found free and closed again can be taken by another test or process
// before it is used, which made tests fail by luck.
package testaddr

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Held returns a loopback address nothing listens on, kept bound (with
// SO_REUSEADDR, not listening) until the test ends. The kernel refuses
// connections to it and gives it to no other ":0" listener meanwhile; a
// listener the test starts on it later (net.Listen sets SO_REUSEADDR too)
// can still bind it.
func Held(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
