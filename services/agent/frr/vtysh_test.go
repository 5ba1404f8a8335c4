package frr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/agent"
)

// TestRunBounded_DeadlineKillsTheProcessGroup: a command that hangs, and
// a child of it that would outlive it (as vtysh under frr-reload.py),
// are both killed at the deadline, and the error says it was the
// deadline.
func TestRunBounded_DeadlineKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := runBounded(ctx, "/bin/sh", "-c", "sleep 60 & echo $! > "+pidFile+"; wait")
	took := time.Since(start)
	if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrNoAnswer wrapping the deadline", err)
	}
	if took > 3*time.Second {
		t.Errorf("returned after %s, want about 300ms", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Killed, it is gone or a zombie (nothing may reap it here).
	deadline := time.Now().Add(2 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hung command's child %d still runs: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInstance_NotInstalled: without vtysh or frr-reload.py every call
// says FRR is not installed, naming the program.
func TestInstance_NotInstalled(t *testing.T) {
	dir := t.TempDir()
	in := Instance{Pathspace: "n1", Vtysh: filepath.Join(dir, "vtysh"), ReloadScript: filepath.Join(dir, "frr-reload.py")}
	ctx := context.Background()
	_, err := in.Run(ctx, "show version")
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), in.Vtysh+" not found") {
		t.Errorf("Run: err = %v, want ErrNotInstalled naming %s", err, in.Vtysh)
	}
	if _, err := (Instance{Vtysh: "sluice-no-such-vtysh"}).Run(ctx, "show version"); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Run with a vtysh not in PATH: err = %v, want ErrNotInstalled", err)
	}
	file := filepath.Join(dir, "frr.conf")
	if err := os.WriteFile(file, []byte("hostname x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Reload(ctx, file); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), in.ReloadScript+" not found") {
		t.Errorf("Reload: err = %v, want ErrNotInstalled naming %s", err, in.ReloadScript)
	}
	if _, err := in.Diff(ctx, file); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Diff: err = %v, want ErrNotInstalled", err)
	}
	out, err := BGP{FRR: in}.Run(ctx, agent.CheckEnv{})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "FRR is unreachable") || !strings.Contains(out, "not found") {
		t.Errorf("BGP check: err = %v, want ErrNotInstalled saying FRR is unreachable\n%s", err, out)
	}
}

// TestReload_RunsTheScriptWithItsOwnInterpreter: frr-reload.py runs with
// the interpreter its first line names (Debian's /usr/bin/python3), not
// with whatever "python3" comes first in PATH (a version manager's shim
// cost 0.2-0.3 s per reload); one without its exec bit still runs with
// python3.
func TestReload_RunsTheScriptWithItsOwnInterpreter(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "frr.conf")
	if err := os.WriteFile(file, []byte("hostname x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, script string
		mode         os.FileMode
		want         string
	}{
		{"executable: its shebang", "#!/bin/sh\necho \"sh: $*\"\n", 0o755, "sh: --reload --stdout --pathspace n1 " + file},
		{"not executable: python3", "import sys\nprint('python:', *sys.argv[1:])\n", 0o644, "python: --reload --stdout --pathspace n1 " + file},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script := filepath.Join(t.TempDir(), "frr-reload.py")
			if err := os.WriteFile(script, []byte(tt.script), tt.mode); err != nil {
				t.Fatal(err)
			}
			out, err := Instance{Pathspace: "n1", ReloadScript: script}.Reload(context.Background(), file)
			if err != nil || out != tt.want {
				t.Errorf("Reload = %q, %v; want %q", out, err, tt.want)
			}
		})
	}
}
