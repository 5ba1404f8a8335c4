package netcheck

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// bindToDevice returns a net.ListenConfig or net.Dialer Control that binds
// the socket to device dev (SO_BINDTODEVICE) before it is bound or
// connected: bound to a VRF device, a socket routes in the VRF's table.
func bindToDevice(dev string) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, dev)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("bind to device %s: %w", dev, serr)
		}
		return nil
	}
}
