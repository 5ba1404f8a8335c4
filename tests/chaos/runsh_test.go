package chaos

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fakeGo stands in for `go test` under run.sh: the suite's run fails seed
// 7 (an invariant) and seed 9 (the harness), each twice in its output as
// the real suite prints them; alone, seed 7 fails again and seed 9 passes.
// With LOGDIRS set, each call also notes the CHAOS_LOG_DIR it was given.
const fakeGo = `#!/bin/sh
echo "$CHAOS_SEED $*" >>"$CALLS"
[ -z "$LOGDIRS" ] || echo "$CHAOS_SEED $CHAOS_LOG_DIR" >>"$LOGDIRS"
case "$*" in
*-parallel*)
	echo "--- FAIL: TestChaos/seed=7"
	echo "    CHAOS FAIL seed=7 invariants=I3,Paused repro: CHAOS_SEED=7 go test"
	echo "    CHAOS HARNESS FAIL seed=9 (the harness's own failure, not a broken invariant) repro: CHAOS_SEED=9 go test"
	echo "CHAOS SUMMARY: 2 of 20 seeds failed; CHAOS FAIL seed=7 invariants=I3,Paused"
	exit 1 ;;
esac
if [ "$CHAOS_SEED" = 7 ]; then
	echo "    CHAOS FAIL seed=7 invariants=I3 repro: CHAOS_SEED=7 go test"
	exit 1
fi
exit 0
`

// make chaos runs each failed seed once more alone and says whether it
// replays, keeping the first run's failure as its exit status.
func TestRunScript_RerunsEachFailedSeedAloneAndSaysWhetherItReplays(t *testing.T) {
	dir := t.TempDir()
	gobin, calls := filepath.Join(dir, "go"), filepath.Join(dir, "calls")
	if err := os.WriteFile(gobin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./run.sh")
	cmd.Env = append(os.Environ(), "GO="+gobin, "CALLS="+calls, "CHAOS_FLAGS=-v")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("run.sh: %v; want exit 1 (a seed failed in the run)\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^CHAOS RERUN seed=7 alone: failed again \(invariants I3\); its log: /tmp/\S+$`,
		`(?m)^CHAOS RERUN seed=9 alone: passed alone \(load\?\); its log: /tmp/\S+$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("no line %s in:\n%s", want, out)
		}
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(got), "\n"), "\n")
	want := []string{
		" test ./tests/chaos -run TestChaos$ -count=1 -parallel 2 -timeout 30m -v",
		"7 test ./tests/chaos -run TestChaos/seed=7$ -count=1 -v -timeout 10m",
		"9 test ./tests/chaos -run TestChaos/seed=9$ -count=1 -v -timeout 10m",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("go was called as\n%s\nwant (one run of the suite, then each failed seed once, alone)\n%s", got, strings.Join(want, "\n"))
	}
}

// With CHAOS_LOG_DIR set, a rerun alone writes its logs to DIR/alone: the
// harness creates DIR/seed-N.log afresh, so a rerun into DIR would erase
// the log of the run that failed, the one worth reading.
func TestRunScript_ARerunKeepsTheFailingRunsLog(t *testing.T) {
	dir := t.TempDir()
	gobin, logdirs := filepath.Join(dir, "go"), filepath.Join(dir, "logdirs")
	if err := os.WriteFile(gobin, []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("./run.sh")
	cmd.Env = append(os.Environ(), "GO="+gobin, "CALLS="+filepath.Join(dir, "calls"), "LOGDIRS="+logdirs, "CHAOS_LOG_DIR=/logs")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("run.sh passed; want exit 1 (a seed failed in the run)\n%s", out)
	}
	got, err := os.ReadFile(logdirs)
	if err != nil {
		t.Fatal(err)
	}
	want := " /logs\n7 /logs/alone\n9 /logs/alone\n"
	if string(got) != want {
		t.Errorf("CHAOS_LOG_DIR per call (seed, dir):\n%s\nwant (the run in DIR, each rerun in DIR/alone)\n%s", got, want)
	}
}
