//go:build !linux

package testproc

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: t.Cleanup is then the only thing that stops the server.
func setParentDeathSignal(*exec.Cmd) {}
