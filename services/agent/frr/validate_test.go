package frr_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/agent/frr"
)

// requireVtysh fails the test when FRR is not installed: these tests are
// about what FRR itself says.
func requireVtysh(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("vtysh"); err != nil {
		t.Fatalf("these tests run FRR's vtysh: install Debian's frr and frr-pythontools (make test does): %v", err)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fakeVtysh puts an executable vtysh with script as its body first on PATH.
func fakeVtysh(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vtysh"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

func TestValidate_RenderedAndMergedFiles_PassFRRsCheck(t *testing.T) {
	requireVtysh(t)
	base := readTestdata(t, "base.conf")
	for _, name := range []string{
		"render-kernel.conf", "render-kernel-cluster-vrf.conf", "render-kernel-empty.conf", "render-off.conf", "render-off-empty.conf",
		"merge-kernel.conf", "merge-rerender.conf",
	} {
		t.Run(name, func(t *testing.T) {
			file := readTestdata(t, name)
			if strings.HasPrefix(name, "render-") {
				file = merge(t, base, file)
			}
			// No daemon runs in this pathspace: the check needs none.
			for _, pathspace := range []string{"", "sluice-no-such-instance"} {
				if err := frr.Validate(ctxFor(t, 30*time.Second), file, pathspace); err != nil {
					t.Fatalf("pathspace %q: %v", pathspace, err)
				}
			}
		})
	}
}

func TestValidate_RefusedLines_CarryFRRsLineAndMessage(t *testing.T) {
	requireVtysh(t)
	// (An incomplete `route-map` followed by `exit` would leave
	// configuration mode, and vtysh would refuse every later line too.)
	base := "hostname leaf1\n!\nbogus command\nip prefix-list mine seq 5 permit\n"
	rendered := "route-map sluice_x permit 10\n set communityx 65000:1\nexit\n"
	merged := merge(t, base, rendered)
	err := frr.Validate(ctxFor(t, 30*time.Second), merged, "")
	var refused *frr.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, frr.ErrRefused) {
		t.Fatalf("Validate = %v; want a *RefusedError matching ErrRefused", err)
	}
	want := []frr.Problem{
		{Line: 3, Message: "% Unknown command", Text: "bogus command"},
		{Line: 4, Message: "% Command incomplete", Text: "ip prefix-list mine seq 5 permit"},
		// The merged file's line: 4 base lines, the begin marker, then the
		// block.
		{Line: 7, InBlock: true, Message: "% Unknown command", Text: "set communityx 65000:1"},
	}
	if len(refused.Problems) != len(want) {
		t.Fatalf("problems %+v; want %+v (vtysh said %q)", refused.Problems, want, refused.Output)
	}
	for i := range want {
		if refused.Problems[i] != want[i] {
			t.Errorf("problem %d = %+v; want %+v", i, refused.Problems[i], want[i])
		}
	}
	msg := err.Error()
	for _, s := range []string{"FRR refused it", "line 3 (base file): % Unknown command: bogus command",
		"line 7 (sluice's block): % Unknown command: set communityx 65000:1"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if !strings.Contains(refused.Output, "line 3: % Unknown command") {
		t.Errorf("Output %q is not vtysh's", refused.Output)
	}
}

func TestValidate_NoVtyshOnPath_SaysFRRIsNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := frr.Validate(ctxFor(t, 5*time.Second), "hostname a\n", "")
	if !errors.Is(err, frr.ErrNotInstalled) || !strings.HasPrefix(err.Error(), "FRR is not installed: ") {
		t.Fatalf("Validate = %v; want ErrNotInstalled, \"FRR is not installed: …\"", err)
	}
}

func TestValidate_HangingVtysh_EndsAtTheDeadlineWithItsChildren(t *testing.T) {
	dir := fakeVtysh(t, `sleep 60 &
echo $! > "$(dirname "$0")/child.pid"
wait
`)
	start := time.Now()
	err := frr.Validate(ctxFor(t, 500*time.Millisecond), "hostname a\n", "")
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
		t.Fatalf("Validate = %v after %v; want the deadline's error within 5s", err, took)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// The child is gone or a zombie (nothing here may reap it): not running.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vtysh's child %d still runs after the deadline: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestValidate_PassesThePathspaceToVtysh(t *testing.T) {
	dir := fakeVtysh(t, `echo "$@" > "$(dirname "$0")/args"`)
	if err := frr.Validate(ctxFor(t, 10*time.Second), "hostname a\n", "node1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Fields(string(b))
	if len(args) != 5 || strings.Join(args[:4], " ") != "-N node1 -C -f" {
		t.Fatalf("vtysh ran with %q; want -N node1 -C -f FILE", args)
	}
	if _, err := os.Stat(args[4]); !os.IsNotExist(err) {
		t.Errorf("the checked copy %s is left behind (stat: %v)", args[4], err)
	}
}

func TestValidate_FailingVtyshWithoutLines_IsRefusedWithItsOutput(t *testing.T) {
	fakeVtysh(t, "echo 'vtysh: cannot open configuration file' >&2; exit 1\n")
	err := frr.Validate(ctxFor(t, 10*time.Second), "hostname a\n", "")
	var refused *frr.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "exited with status 1: vtysh: cannot open configuration file") {
		t.Fatalf("Validate = %v; want a refusal carrying vtysh's status and output", err)
	}
}
