package testproc

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the server when the test
// binary dies without running its cleanups (a test timeout panics), so no
// server outlives its test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
