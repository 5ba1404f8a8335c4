package testproc_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/testproc"
)

// A Slot kills its process on Stop (a second Stop does nothing), refuses
// Restart while a process runs, and on Restart after Stop runs start again,
// wrapping its error.
func TestSlot_StopAndRestart(t *testing.T) {
	var s testproc.Slot
	starts := 0
	var last *testproc.Process
	start := func() error {
		starts++
		p, err := testproc.Start(exec.Command("sleep", "60"))
		if err != nil {
			return err
		}
		last = p
		s.Set(p)
		return nil
	}
	t.Cleanup(s.Stop)
	if err := start(); err != nil {
		t.Fatal(err)
	}
	err := s.Restart("kit", "127.0.0.1:1", start)
	if err == nil || !strings.Contains(err.Error(), "kit: Restart of the server at 127.0.0.1:1, which is running") {
		t.Fatalf("Restart while running = %v, want the running error", err)
	}
	if starts != 1 {
		t.Fatalf("Restart while running called start: %d starts", starts)
	}
	first := last
	s.Stop()
	select {
	case <-first.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	s.Stop() // stopped: nothing to do
	if err := s.Restart("kit", "127.0.0.1:1", start); err != nil {
		t.Fatalf("Restart after Stop: %v", err)
	}
	if starts != 2 || last == first {
		t.Fatalf("Restart after Stop: %d starts, want a new process", starts)
	}
	s.Stop()
	boom := errors.New("boom")
	err = s.Restart("kit", "127.0.0.1:1", func() error { return boom })
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "kit: restart: ") {
		t.Fatalf("Restart with a failing start = %v, want kit: restart: boom", err)
	}
}
