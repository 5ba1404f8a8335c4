package testproc_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testproc"
)

// Stop reports a clean exit only for a process that handled SIGTERM and
// exited 0; one the signal killed, or that ignored it until the grace ran
// out (then killed), is not.
func TestStop_TellsACleanExitFromAKill(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         bool
	}{
		{"exits 0 on SIGTERM", `trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done`, true},
		{"exits 3 on SIGTERM", `trap 'exit 3' TERM; echo up; while :; do sleep 0.05; done`, false},
		{"ignores SIGTERM", `trap '' TERM; echo up; while :; do sleep 0.05; done`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := testproc.Start(exec.Command("sh", "-c", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Kill)
			// margin: the poll ends as soon as the shell has set its trap.
			for deadline := time.Now().Add(10 * time.Second); p.Output() == ""; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the shell did not start")
				}
			}
			if got := p.Stop(500 * time.Millisecond); got != tc.want {
				t.Errorf("Stop = %v, want %v (%v)", got, tc.want, p.State())
			}
			select {
			case <-p.Exited():
			default:
				t.Error("Stop returned before the process exited")
			}
		})
	}
}
