// Package netnsutil runs code in another network namespace on a thread of
// its own, and puts that thread back where it was: the one way the agent's
// VRF probe and the tests' namespace helpers switch namespaces.
package netnsutil

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// OnLockedThread runs fn on a goroutine locked to its OS thread, then puts
// the thread back in the network namespace it started in; fn may move the
// thread (netns.Set, netns.New). If going back fails the thread stays
// locked, and the runtime ends it with the goroutine, so no other goroutine
// ever runs in a namespace it did not ask for.
func OnLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer func() { _ = orig.Close() }()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("back to the original network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// RunIn runs fn on an OS thread that is in the network namespace ns, and
// returns its error. Sockets fn opens stay in ns after it returns.
func RunIn(ns netns.NsHandle, fn func() error) error {
	return OnLockedThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter network namespace: %w", err)
		}
		return fn()
	})
}
