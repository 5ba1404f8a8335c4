package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
)

// A console as the guest prints it: kernel noise, a binary's
// -test.v=test2json lines (framed by ^V markers), exit statuses, the end.
func console(lines ...string) []byte { return []byte(strings.Join(lines, "\r\n") + "\r\n") }

const v = "\x16" // test2json's frame marker

func TestSummarize(t *testing.T) {
	bins := []binary{{name: "hostnet"}}
	pass := []string{
		"[    1.0] random: crng init done",
		"@out hostnet " + v + "=== RUN   TestA",
		"@out hostnet " + v + "--- PASS: TestA (0.10s)",
		"@out hostnet " + v + "=== NAME  ",
		"@out hostnet " + v + "=== RUN   TestB",
		"@out hostnet     b_test.go:9: no VRFs",
		"@out hostnet " + v + "--- SKIP: TestB (0.00s)",
		"@out hostnet " + v + "=== NAME  ",
		"@out hostnet " + v + "=== RUN   TestC",
		"@out hostnet     c_test.go:3: boom",
		"@out hostnet " + v + "--- FAIL: TestC (0.20s)",
		"@out hostnet " + v + "=== NAME  ",
		"@out hostnet " + v + "FAIL",
	}
	for _, tc := range []struct {
		name         string
		console      []byte
		passed       int
		failed       int
		wantProblems []string
	}{
		{"a skip and a failure both fail; the exit status and the end are read", console(append(pass, "@exit hostnet 1", "@done")...), 1, 2,
			[]string{"hostnet: exited 1"}},
		{"a guest that never ended", console(pass[:4]...), 1, 0,
			[]string{"hostnet: the guest printed no exit status for it", "never printed its end marker"}},
		{"no output at all", console("Kernel panic - not syncing"), 0, 0,
			[]string{"hostnet: read its output: no output at all", "hostnet: the guest printed no exit status", "never printed its end marker"}},
		{"a module that did not load", console(append(pass[:4], "@exit modules 1 insmod vrf.ko failed", "@exit hostnet 0", "@done")...), 1, 0,
			[]string{"a kernel module did not load"}},
		{"a host share that did not mount", console(append(pass[:4], "@exit share 1 mount /usr failed", "@exit hostnet 0", "@done")...), 1, 0,
			[]string{"the guest could not mount the host's /usr and /etc"}},
		{"all passed", console(append(pass[:4], "@exit hostnet 0", "@done")...), 1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := summarize(context.Background(), tc.console, bins, io.Discard, false)
			if res.passed != tc.passed || res.failed != tc.failed {
				t.Errorf("passed %d, failed %d; want %d, %d", res.passed, res.failed, tc.passed, tc.failed)
			}
			got := strings.Join(res.problems, "\n")
			for _, w := range tc.wantProblems {
				if !strings.Contains(got, w) {
					t.Errorf("problems:\n%s\nwant one containing %q", got, w)
				}
			}
			if len(tc.wantProblems) == 0 && len(res.problems) > 0 {
				t.Errorf("problems: %v, want none", res.problems)
			}
		})
	}
}

func TestResolveModules_DependenciesFirstEachOnce(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/net/bridge/bridge.ko: kernel/net/802/stp.ko kernel/net/llc/llc.ko\n" +
		"kernel/net/802/stp.ko: kernel/net/llc/llc.ko\nkernel/net/llc/llc.ko:\n" +
		"kernel/net/8021q/8021q.ko: kernel/net/802/stp.ko kernel/net/llc/llc.ko\n"
	if err := writeFile(dir+"/modules.dep", dep); err != nil {
		t.Fatal(err)
	}
	got, err := resolveModules(dir, []string{"bridge", "8021q"})
	if err != nil {
		t.Fatal(err)
	}
	want := "kernel/net/llc/llc.ko kernel/net/802/stp.ko kernel/net/bridge/bridge.ko kernel/net/8021q/8021q.ko"
	if strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
	if _, err := resolveModules(dir, []string{"vrf"}); err == nil || !strings.Contains(err.Error(), "module vrf") {
		t.Fatalf("an unknown module: %v, want an error naming it", err)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
