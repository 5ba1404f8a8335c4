package frr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Debian's FRR layout (frr 8.4): where an instance's config and sockets
// live, and its programs.
const (
	// ConfDir holds an instance's frr.conf and vtysh.conf: ConfDir/frr.conf,
	// or ConfDir/<pathspace>/frr.conf for a pathspace.
	ConfDir = "/etc/frr"
	// RunDir holds an instance's vty sockets (<daemon>.vty) and pid files:
	// RunDir, or RunDir/<pathspace>.
	RunDir = "/var/run/frr"
	// DefaultVtysh is the vtysh an Instance runs when it names none (looked
	// up in PATH).
	DefaultVtysh = "vtysh"
	// DefaultReloadScript is the frr-reload.py an Instance runs when it
	// names none (Debian's frr-pythontools).
	DefaultReloadScript = "/usr/lib/frr/frr-reload.py"
	// DefaultCommandTimeout bounds one vtysh or frr-reload run whose
	// context has no deadline: FRR answers a show command in tens of
	// milliseconds and a reload in about a second, so a run that takes
	// this long hangs.
	DefaultCommandTimeout = 30 * time.Second
)

// Instance is one FRR instance on this host, addressed by its pathspace
// (vtysh -N, the daemons' -N): its config is ConfDir/<pathspace>/frr.conf
// and its sockets are in RunDir/<pathspace>/. The zero value is the
// default instance with Debian's programs. Its methods run vtysh and
// frr-reload.py, each bounded by its context (DefaultCommandTimeout when
// the context has no deadline); a run that outlives it is killed with
// its whole process group.
type Instance struct {
	// Pathspace names the instance ("" = the default instance, no -N).
	Pathspace string
	// Vtysh is the vtysh program ("" = DefaultVtysh).
	Vtysh string
	// ReloadScript is frr-reload.py ("" = DefaultReloadScript).
	ReloadScript string
}

// String names the instance in messages: `FRR pathspace "n1"` or "the
// default FRR instance".
func (i Instance) String() string {
	if i.Pathspace == "" {
		return "the default FRR instance"
	}
	return fmt.Sprintf("FRR pathspace %q", i.Pathspace)
}

// SocketDir is where the instance's daemons put their vty sockets.
func (i Instance) SocketDir() string { return filepath.Join(RunDir, i.Pathspace) }

// ConfigFile is the instance's integrated config file (vtysh -b reads it).
func (i Instance) ConfigFile() string { return filepath.Join(ConfDir, i.Pathspace, "frr.conf") }

func (i Instance) vtyshArgs(args ...string) []string {
	if i.Pathspace != "" {
		args = append([]string{"-N", i.Pathspace}, args...)
	}
	return args
}

// Run runs the commands in one vtysh session (vtysh -c CMD …) and returns
// what it printed on stdout. A command FRR does not accept ("% Unknown
// command") is an ErrRefused error quoting FRR.
func (i Instance) Run(ctx context.Context, cmds ...string) (string, error) {
	if len(cmds) == 0 {
		return "", errors.New("vtysh: no command to run")
	}
	var args []string
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	return i.vtysh(ctx, "vtysh -c "+quoteCmds(cmds), args...)
}

// JSON runs one show command ending in "json" and decodes its answer
// into v.
func (i Instance) JSON(ctx context.Context, cmd string, v any) error {
	out, err := i.Run(ctx, cmd)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("%s: %q answered something that is not JSON (%w): %s", i, cmd, err, clip(out, 200))
	}
	return nil
}

// Boot pushes the instance's integrated config file to its running
// daemons (vtysh -b), as FRR's init script does after starting them.
func (i Instance) Boot(ctx context.Context) (string, error) {
	return i.vtysh(ctx, "vtysh -b", "-b")
}

// ExecFile runs the commands of file against the running daemons (vtysh
// -f): lines are added to the running config, nothing is removed. Use
// Reload to make the running config equal a file.
func (i Instance) ExecFile(ctx context.Context, file string) (string, error) {
	return i.vtysh(ctx, "vtysh -f "+file, "-f", file)
}

// RunningConfig returns "show running-config".
func (i Instance) RunningConfig(ctx context.Context) (string, error) {
	return i.Run(ctx, "show running-config")
}

// Ping asks the instance for its version through every daemon it runs: nil
// when they answer, else the reason (ErrNotInstalled, ErrNotRunning,
// ErrNoAnswer).
func (i Instance) Ping(ctx context.Context) error {
	_, err := i.Run(ctx, "show version")
	return err
}

// withDefaultTimeout bounds ctx by DefaultCommandTimeout if it has no
// deadline.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultCommandTimeout)
}

// vtysh runs vtysh with args (what names the run in errors) and returns
// its stdout.
func (i Instance) vtysh(ctx context.Context, what string, args ...string) (string, error) {
	bin := i.Vtysh
	if bin == "" {
		bin = DefaultVtysh
	}
	stdout, stderr, err := runBounded(ctx, bin, i.vtyshArgs(args...)...)
	if err == nil {
		return stdout, nil
	}
	return stdout, i.explain(what, bin, stdout, stderr, err)
}

// explain turns a failed vtysh run into an error naming the instance, the
// command and FRR's reason.
func (i Instance) explain(what, bin, stdout, stderr string, err error) error {
	said := strings.TrimSpace(strings.TrimSpace(stdout) + "\n" + strings.TrimSpace(stderr))
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s: %s not found (install Debian's frr and frr-pythontools): %w", ErrNotInstalled, what, bin, err)
	case errors.Is(err, ErrNoAnswer):
		return fmt.Errorf("%s: %s: %w (is a daemon in %s hung?)", i, what, err, i.SocketDir())
	case strings.Contains(said, "failed to connect to any daemons"):
		if _, serr := os.Stat(i.SocketDir()); serr != nil && i.Pathspace != "" {
			return fmt.Errorf("%s: %s: %w: no daemon answers and %s does not exist (is FRR started with -N %s?)", i, what, ErrNotRunning, i.SocketDir(), i.Pathspace)
		}
		return fmt.Errorf("%s: %s: %w: no daemon answers on the sockets in %s (vtysh: %q)", i, what, ErrNotRunning, i.SocketDir(), lastLine(said))
	}
	if m := notRunning.FindStringSubmatch(said); m != nil {
		return fmt.Errorf("%s: %s: %w: %s does not answer at %s", i, what, ErrNotRunning, m[1], filepath.Join(i.SocketDir(), m[1]+".vty"))
	}
	if said == "" {
		return fmt.Errorf("%s: %s: %w", i, what, err)
	}
	return fmt.Errorf("%s: %s: %w: %s (%w)", i, what, ErrRefused, clip(frrMessage(said), 2000), err)
}

// notRunning is vtysh's word for a daemon a command needs that is not up.
var notRunning = regexp.MustCompile(`(?m)^(\w+) is not running`)

// frrMessage drops vtysh's complaint about a missing vtysh.conf from said:
// it accompanies every message of a pathspace without one and is never
// the reason.
func frrMessage(said string) string {
	var keep []string
	for _, l := range strings.Split(said, "\n") {
		if strings.HasPrefix(l, "% Can't open configuration file") && strings.Contains(l, "vtysh.conf") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// runBounded runs bin with args in a process group of its own, killed
// whole when ctx ends (its children too: frr-reload.py runs vtysh), and
// returns stdout and stderr. A run ended by ctx returns an ErrNoAnswer
// error saying how long it ran.
func runBounded(ctx context.Context, bin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("%s not run: %w", bin, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	err = cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: killed after %s (%w)", ErrNoAnswer, time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	return out.String(), errb.String(), err
}

func quoteCmds(cmds []string) string {
	q := make([]string, len(cmds))
	for i, c := range cmds {
		q[i] = fmt.Sprintf("%q", c)
	}
	return strings.Join(q, " -c ")
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// clip returns s cut to n bytes, marked when cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
