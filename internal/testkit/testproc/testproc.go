// Package testproc runs a server binary a test owns (redis-server,
// prometheus): its output kept for the failure message, killed by the
// kernel if the test binary dies without its cleanups (Linux), and
// stopped as a crash would (Kill) or asked to stop (Stop).
package testproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one run of a server binary.
type Process struct {
	cmd    *exec.Cmd
	out    syncBuffer    // stdout and stderr
	exited chan struct{} // closed when it has exited
}

// Start starts cmd with its stdout and stderr kept (Output).
func Start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Kill kills the process, as a crash would, and waits until it has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop asks the process to stop (SIGTERM), as an orchestrator does in a
// rolling restart, and waits up to grace for it to exit before killing it.
// It reports whether the process exited on its own, with status 0.
func (p *Process) Stop(grace time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.Success()
	case <-t.C:
		p.Kill()
		return false
	}
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// State is how it exited; nil while it runs.
func (p *Process) State() *os.ProcessState { return p.cmd.ProcessState }

// Pid is its process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is what it wrote so far.
func (p *Process) Output() string { return p.out.String() }

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
