//go:build !linux

package netcheck

import (
	"errors"
	"syscall"
)

// bindToDevice fails: binding a socket to a device (and so to a VRF) is
// Linux's SO_BINDTODEVICE.
func bindToDevice(dev string) func(network, address string, c syscall.RawConn) error {
	return func(string, string, syscall.RawConn) error {
		return errors.New("binding a socket to device " + dev + " needs Linux")
	}
}
