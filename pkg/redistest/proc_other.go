//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: t.Cleanup is then the only thing that stops redis-server.
func setParentDeathSignal(*exec.Cmd) {}
