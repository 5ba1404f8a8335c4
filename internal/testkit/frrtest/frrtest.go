// Package frrtest runs real FRR instances for tests: Start runs zebra,
// bgpd and staticd of one pathspace inside a network namespace (one made
// by hostnettest), as foreground children of the test process, loads a
// config and waits until vtysh answers; t.Cleanup stops every daemon
// (SIGTERM, then SIGKILL), waits for it and removes its directories. A
// failed test prints the daemons' logs.
//
// The daemons are this process's children and it waits for them: nothing
// is left to a PID 1 that may reap no orphans. They run as user frr
// (-u frr -g frr: FRR refuses root unless root is in group frrvty), with
// their TCP vty ports off (-P 0).
//
// It needs Debian's frr and frr-pythontools, and root. Require skips a
// test without them, saying why, unless EnvRequire is set: then it fails.
package frrtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// EnvRequire, set to 1 (make test and .ci/run set it, where FRR is
// installed), makes Require fail a test instead of skipping it.
const EnvRequire = "SLUICE_REQUIRE_FRR"

// DaemonDir holds FRR's daemons (Debian).
const DaemonDir = "/usr/lib/frr"

// Bounds of an instance's life.
const (
	// StartTimeout bounds the wait for every daemon to answer vtysh and
	// for the config to load. Under qemu's TCG every FRR command is 5-10×
	// slower than on a host: it leaves room for that.
	StartTimeout = 30 * time.Second
	// StopTimeout is how long a daemon has to exit after SIGTERM before
	// it gets SIGKILL.
	StopTimeout = 5 * time.Second
)

// DefaultDaemons are the daemons Start runs when Options names none, in
// start order (zebra first: the others connect to it).
var DefaultDaemons = []string{"zebra", "bgpd", "staticd"}

// Require skips t, saying why, when FRR's programs are missing or this
// process is not root; with EnvRequire=1 it fails t instead.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath(frr.DefaultVtysh); err != nil {
		missing = append(missing, "vtysh")
	}
	for _, p := range []string{frr.DefaultReloadScript, filepath.Join(DaemonDir, "zebra"), filepath.Join(DaemonDir, "bgpd"), filepath.Join(DaemonDir, "staticd")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "ip (iproute2)")
	}
	var why string
	switch {
	case len(missing) > 0:
		why = fmt.Sprintf("FRR is not installed (missing %s): apt-get install frr frr-pythontools", strings.Join(missing, ", "))
	case os.Geteuid() != 0:
		why = "FRR's daemons need root (network namespaces, and dropping to user frr)"
	default:
		if _, err := user.Lookup("frr"); err != nil {
			why = fmt.Sprintf("no user frr (Debian's frr package creates it): %v", err)
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s=1 but %s", EnvRequire, why)
	}
	t.Skip(why)
}

// Options say how to start an instance.
type Options struct {
	// Pathspace names the instance ("" = the namespace's name).
	Pathspace string
	// Config is the frr.conf to boot with (vtysh -b). Its hostname line,
	// if any, is kept; without one, Start puts the host's name first (the
	// daemons take theirs from the host: any other would show in every
	// frr-reload diff).
	Config string
	// Daemons to run (nil = DefaultDaemons).
	Daemons []string
	// Args are extra arguments for every daemon (zebra -n: "--vrfwnetns"
	// goes in ZebraArgs).
	Args []string
	// ZebraArgs are extra arguments for zebra only.
	ZebraArgs []string
}

// Instance is a running FRR instance of a test.
type Instance struct {
	frr.Instance
	// Netns is the network namespace its daemons run in.
	Netns string
	// Started is when the first daemon was started.
	Started time.Time

	t       testing.TB
	logDir  string
	mu      sync.Mutex
	daemons map[string]*daemon // the latest of each name
	all     []*daemon          // in start order, restarted ones too
	quiet   func()             // releases QuietNamespaces (a --vrfwnetns zebra); nil when not held
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once Wait returned
	err  error         // Wait's, once done
}

// Start runs FRR in the network namespace netns (its name, as "ip netns"
// lists it) and returns once every daemon answers vtysh and opts.Config
// is loaded; it fails t otherwise. Everything ends in t.Cleanup, which
// must run before the namespace's own cleanup: create the namespace
// first.
func Start(t testing.TB, netns string, opts Options) *Instance {
	t.Helper()
	ps := opts.Pathspace
	if ps == "" {
		ps = netns
	}
	daemons := opts.Daemons
	if daemons == nil {
		daemons = DefaultDaemons
	}
	in := &Instance{Instance: frr.Instance{Pathspace: ps}, Netns: netns, t: t, logDir: t.TempDir(), daemons: map[string]*daemon{}}
	confDir, runDir := filepath.Join(frr.ConfDir, ps), in.SocketDir()
	for _, d := range []string{confDir, runDir} {
		if _, err := os.Stat(d); err == nil {
			t.Fatalf("frrtest: %s exists: pathspace %s is in use (by another test or a crashed run)", d, ps)
		}
	}
	t.Cleanup(func() { in.cleanup(confDir, runDir) })

	conf := opts.Config
	if !hasHostname(conf) {
		host, err := os.Hostname()
		if err != nil {
			t.Fatalf("frrtest: hostname: %v", err)
		}
		conf = "hostname " + host + "\n" + conf
	}
	uid, gid := frrIDs(t)
	for _, d := range []string{confDir, runDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("frrtest: %v", err)
		}
	}
	for name, body := range map[string]string{"frr.conf": conf, "vtysh.conf": "service integrated-vtysh-config\n"} {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(body), 0o640); err != nil {
			t.Fatalf("frrtest: %v", err)
		}
	}
	for _, p := range []string{confDir, runDir, filepath.Join(confDir, "frr.conf"), filepath.Join(confDir, "vtysh.conf")} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatalf("frrtest: chown %s to frr: %v", p, err)
		}
	}

	in.Started = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	// zebra first, answering, then the others: a daemon started before
	// zebra's socket exists retries its connection only after about 10 s
	// (staticd's routes came 10 s late that way).
	first := 0
	if len(daemons) > 0 && daemons[0] == "zebra" {
		first = 1
	}
	// A zebra that watches /run/netns (a VRF per namespace) aborts when a
	// namespace comes or goes while it starts or runs (FRR issue 19232 for
	// a deletion): none does, machine-wide, until it is stopped (cleanup).
	// A test must make its namespaces before it starts such an instance.
	if first == 1 && (slices.Contains(opts.ZebraArgs, "--vrfwnetns") || slices.Contains(opts.ZebraArgs, "-n")) {
		in.quiet = hostnettest.QuietNamespaces(t)
	}
	for _, group := range [][]string{daemons[:first], daemons[first:]} {
		for _, name := range group {
			args := append([]string{"-N", ps, "-u", "frr", "-g", "frr", "-P", "0", "--log", "stdout"}, opts.Args...)
			if name == "zebra" {
				args = append(args, opts.ZebraArgs...)
			}
			if err := in.StartDaemon(name, args...); err != nil {
				t.Fatalf("frrtest: %v", err)
			}
		}
		for _, name := range group {
			if err := in.waitDaemon(ctx, name); err != nil {
				t.Fatalf("frrtest: %s: %v\n%s", in, err, in.Logs())
			}
		}
	}
	if out, err := in.Boot(ctx); err != nil {
		t.Fatalf("frrtest: %s: load the config: %v\n%s\n%s", in, err, out, in.Logs())
	}
	t.Logf("frrtest: %s up in netns %s after %s (%s)", in, netns, time.Since(in.Started).Round(time.Millisecond), strings.Join(daemons, ", "))
	return in
}

func hasHostname(conf string) bool {
	for _, l := range strings.Split(conf, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "hostname ") {
			return true
		}
	}
	return false
}

func frrIDs(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("frr")
	if err == nil {
		uid, err = strconv.Atoi(u.Uid)
	}
	if err == nil {
		gid, err = strconv.Atoi(u.Gid)
	}
	if err != nil {
		t.Fatalf("frrtest: user frr: %v", err)
	}
	return uid, gid
}

// StartDaemon starts /usr/lib/frr/<name> with args in the instance's
// namespace, its output to its log. It is stopped in t.Cleanup, or by
// StopDaemon.
func (in *Instance) StartDaemon(name string, args ...string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if d := in.daemons[name]; d != nil {
		select {
		case <-d.done:
		default:
			return fmt.Errorf("%s: %s is already running", in, name)
		}
	}
	logPath := filepath.Join(in.logDir, fmt.Sprintf("%s-%d.log", name, len(in.all)))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", in.Netns, filepath.Join(DaemonDir, name)}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	// A group of its own: a ^C to the test does not hit it before cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s: start %s: %w", in, name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		_ = f.Close()
		close(d.done)
	}()
	in.daemons[name] = d
	in.all = append(in.all, d)
	return nil
}

// waitDaemon waits until vtysh reaches daemon name itself (vtysh -d), or
// ctx ends, or the daemon exits.
func (in *Instance) waitDaemon(ctx context.Context, name string) error {
	d := in.daemon(name)
	bin := in.Vtysh
	if bin == "" {
		bin = frr.DefaultVtysh
	}
	for {
		out, err := exec.CommandContext(ctx, bin, "-N", in.Pathspace, "-d", name, "-c", "show version").CombinedOutput()
		if err == nil {
			return nil
		}
		select {
		case <-d.done:
			return fmt.Errorf("%s exited before answering: %v", name, d.err)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer vtysh within %s: %v: %s", name, StartTimeout, err, bytes.TrimSpace(out))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (in *Instance) daemon(name string) *daemon {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.daemons[name]
}

// Signal sends sig to daemon name (SIGSTOP makes it hang, SIGCONT ends
// that).
func (in *Instance) Signal(name string, sig syscall.Signal) error {
	d := in.daemon(name)
	if d == nil {
		return fmt.Errorf("%s: no daemon %s", in, name)
	}
	return d.cmd.Process.Signal(sig)
}

// StopDaemon stops daemon name (SIGTERM, SIGKILL after StopTimeout) and
// waits for it to exit.
func (in *Instance) StopDaemon(name string) error {
	d := in.daemon(name)
	if d == nil {
		return fmt.Errorf("%s: no daemon %s", in, name)
	}
	return stop(d)
}

func stop(d *daemon) error {
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGCONT) // a stopped daemon cannot act on SIGTERM
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(StopTimeout):
	}
	_ = d.cmd.Process.Kill()
	select {
	case <-d.done:
		return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", d.name, StopTimeout)
	case <-time.After(StopTimeout):
		return fmt.Errorf("%s did not exit within %s of SIGKILL (pid %d)", d.name, StopTimeout, d.cmd.Process.Pid)
	}
}

// Logs returns every daemon's log, each under a header.
func (in *Instance) Logs() string {
	in.mu.Lock()
	ds := slices.Clone(in.all)
	in.mu.Unlock()
	var b bytes.Buffer
	for _, d := range ds {
		body, err := os.ReadFile(d.log)
		if err != nil {
			body = []byte(err.Error())
		}
		fmt.Fprintf(&b, "--- %s %s (%s):\n%s\n", in, d.name, d.log, bytes.TrimSpace(body))
	}
	return b.String()
}

// cleanup stops every daemon, the last started first, waits for them and
// removes the instance's directories; after a failed test it prints the
// logs.
func (in *Instance) cleanup(confDir, runDir string) {
	in.mu.Lock()
	ds := slices.Clone(in.all)
	in.mu.Unlock()
	slices.Reverse(ds)
	var errs []error
	for _, d := range ds {
		if err := stop(d); err != nil {
			errs = append(errs, err)
		}
	}
	if in.quiet != nil {
		in.quiet() // its zebra is stopped: namespaces may come and go again
	}
	if in.t.Failed() || len(errs) > 0 {
		in.t.Logf("frrtest: logs of %s:\n%s", in, in.Logs())
	}
	for _, d := range []string{confDir, runDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		in.t.Errorf("frrtest: stop %s: %v", in, err)
	}
}
