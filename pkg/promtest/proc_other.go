//go:build !linux

package promtest

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: t.Cleanup is then the only thing that stops prometheus.
func setParentDeathSignal(*exec.Cmd) {}
