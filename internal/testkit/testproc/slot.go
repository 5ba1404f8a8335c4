package testproc

import (
	"fmt"
	"sync"
)

// Slot holds the current run of a server a test may stop and start again
// (promtest, redistest): the one Stop and Restart both share.
type Slot struct {
	mu sync.Mutex
	p  *Process // nil when stopped
}

// Set records p as the running process.
func (s *Slot) Set(p *Process) {
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
}

// Stop kills the running process, as a crash would. Stopping a stopped
// slot does nothing.
func (s *Slot) Stop() {
	s.mu.Lock()
	p := s.p
	s.p = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	p.Kill()
}

// Restart runs start for a stopped slot; start calls Set once the process
// is ready. It fails, naming the helper pkg and the server's addr, when the
// process is still running or start fails.
func (s *Slot) Restart(pkg, addr string, start func() error) error {
	s.mu.Lock()
	running := s.p != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("%s: Restart of the server at %s, which is running: Stop it first", pkg, addr)
	}
	if err := start(); err != nil {
		return fmt.Errorf("%s: restart: %w", pkg, err)
	}
	return nil
}
