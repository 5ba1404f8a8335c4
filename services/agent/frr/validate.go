package frr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Problem is one line FRR refused.
type Problem struct {
	// Line is the line of the merged file, counted from 1.
	Line int `json:"line"`
	// InBlock tells whether the line is in sluice's block (else it is the
	// operator's, from the base file).
	InBlock bool `json:"inBlock"`
	// Message is FRR's, e.g. "% Unknown command".
	Message string `json:"message"`
	// Text is the line as FRR read it.
	Text string `json:"text"`
}

func (p Problem) String() string {
	where := "base file"
	if p.InBlock {
		where = "sluice's block"
	}
	return fmt.Sprintf("line %d (%s): %s: %s", p.Line, where, p.Message, p.Text)
}

// problemLine is one line of vtysh -C's complaint:
// "line 6: % Unknown command[59]:  set communityx 65000:1".
var problemLine = regexp.MustCompile(`^line (\d+): (%[^\[:]*)(?:\[\d+\])?:\s*(.*)$`)

// Validate checks merged (Merge's output) with FRR's own parser, `vtysh -C
// -f FILE` (with `-N pathspace` when pathspace is not ""), and changes
// nothing: no daemon needs to run. A file FRR refuses gives a
// *RefusedError naming each line and FRR's message; no vtysh on PATH gives
// ErrNotInstalled; the check ends when ctx does (vtysh and its children
// are killed), with ctx's cause.
//
// vtysh -C checks the syntax of every command in its place, not what only
// a daemon checks (ge above le in a prefix list is accepted here and
// refused by the daemon): Render checks those itself.
func Validate(ctx context.Context, merged, pathspace string) error {
	vtysh, err := exec.LookPath("vtysh")
	if err != nil {
		return fmt.Errorf("%w: no vtysh on the agent's PATH (%s): install FRR (Debian's frr and frr-pythontools) or add its directory to PATH", ErrNotInstalled, os.Getenv("PATH"))
	}
	f, err := os.CreateTemp("", "sluice-frr-*.conf")
	if err != nil {
		return fmt.Errorf("validate FRR config: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.WriteString(merged); err != nil {
		_ = f.Close()
		return fmt.Errorf("validate FRR config: write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("validate FRR config: write %s: %w", f.Name(), err)
	}

	var args []string
	if pathspace != "" {
		args = append(args, "-N", pathspace)
	}
	args = append(args, "-C", "-f", f.Name())
	cmd := exec.CommandContext(ctx, vtysh, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, killed whole at ctx's end: a child that holds
	// the output open must not keep the check running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("validate FRR config: %s %s did not finish: %w", vtysh, strings.Join(args, " "), context.Cause(ctx))
	}
	output := strings.TrimSpace(out.String())
	problems := parseProblems(output, blockSpan(merged))
	var exit *exec.ExitError
	switch {
	case len(problems) > 0:
		return &RefusedError{Problems: problems, Output: output}
	case errors.As(runErr, &exit):
		return &RefusedError{Output: fmt.Sprintf("%s exited with status %d: %s", vtysh, exit.ExitCode(), output)}
	case runErr != nil:
		return fmt.Errorf("validate FRR config: run %s: %w", vtysh, runErr)
	}
	return nil
}

// parseProblems reads vtysh -C's complaints; block is the span of lines
// (from, to, counted from 1) of sluice's block, 0 and 0 when there is none.
func parseProblems(output string, block [2]int) []Problem {
	var out []Problem
	for _, l := range strings.Split(output, "\n") {
		m := problemLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		out = append(out, Problem{
			Line: n, InBlock: n >= block[0] && n <= block[1] && block[0] > 0,
			Message: strings.TrimSpace(m[2]), Text: strings.TrimSpace(m[3]),
		})
	}
	return out
}

// blockSpan returns the lines of the markers of sluice's block in merged.
func blockSpan(merged string) [2]int {
	begin, end, err := findBlock(splitLines(merged))
	if err != nil || begin < 0 {
		return [2]int{}
	}
	return [2]int{begin + 1, end + 1}
}
