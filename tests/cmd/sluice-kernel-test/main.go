// Command sluice-kernel-test runs test binaries inside Debian's kernel under
// qemu, for the tests this machine's own kernel cannot run (it has no
// CONFIG_NET_VRF). make test-kernel builds the binaries (static: go test -c
// with CGO_ENABLED=0) and calls it.
//
// It builds an initramfs (busybox, the kernel modules the tests need with
// their dependencies, the binaries and an /init script), boots it with
// qemu's software emulation on one virtual CPU with the host's /usr and
// /etc shared read-only over virtio-9p (so that the tests can run the
// host's FRR; /etc under a tmpfs overlay in the guest), reads the serial
// console,
// turns each binary's -test.v=test2json output into test events with
// `go tool test2json`, prints one line per test and ends with
// "N passed, N failed". It exits 1 when a test failed, a test skipped (here
// nothing may skip: a VRF test that skips did not run where it must), a
// binary exited non-zero, or the guest never printed its end marker before
// --timeout: qemu's own exit status says nothing about the guest. The
// binaries run with SLUICE_KERNEL_VRFS=required and SLUICE_REQUIRE_FRR=1.
//
//	sluice-kernel-test [flags] NAME=BINARY[:ARGS] ...
//
// NAME labels a binary's lines; ARGS (space separated) are given to it
// after -test.v=test2json, e.g. "-test.run ^TestEndToEnd_Netlink".
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Lines the guest's /init prints on the serial console, each starting a
// line: a binary's output (markOut NAME LINE), its exit status (markExit
// NAME CODE) and the end of the run (markDone).
const (
	markOut  = "@out "
	markExit = "@exit "
	markDone = "@done"
)

// modules are what the tests load, in an order that satisfies their
// dependencies once each one's own (modules.dep) come first: links the
// netlink applier makes (bridge, 802.1Q, veth, macvlan, VXLAN, VRF, dummy),
// then what the guest needs to mount the host's shares (virtio PCI, 9p
// over virtio, overlay).
var modules = []string{"bridge", "8021q", "veth", "macvlan", "vxlan", "vrf", "dummy", "virtio_pci", "9pnet_virtio", "9p", "overlay"}

// share is a host directory the guest mounts read-only over virtio-9p.
type share struct{ tag, path string }

// shares are the host's /usr and /etc, so that the tests can run the
// host's FRR (its daemons, vtysh, frr-reload.py and python3), iproute2's
// ip (ip netns exec) and read its users (FRR drops to user frr). The
// guest mounts /usr as it is and /etc under a tmpfs overlay, where the
// tests write FRR's per-instance config: nothing reaches the host.
var shares = []share{{"usr", "/usr"}, {"etc", "/etc"}}

// The guest's own tools are busybox's, in bbDir: its /bin, /sbin and
// /lib are links into /usr as on the host (merged /usr), so that the
// host's programs and the links between them (/usr/sbin/ip -> /bin/ip)
// resolve to the host's. guestPath is the tests' PATH: the host's
// programs first, busybox's where the host has none.
const (
	bbDir     = "/bbin"
	guestPath = "/usr/sbin:/usr/bin:" + bbDir
)

type binary struct {
	name, path string
	args       []string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-kernel-test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kernel := fs.String("kernel", "", "the kernel image (default: the newest /boot/vmlinuz-*)")
	qemu := fs.String("qemu", "qemu-system-x86_64", "the qemu binary")
	busybox := fs.String("busybox", "/bin/busybox", "a static busybox for the guest's shell and tools")
	memory := fs.Int("memory", 1024, "the guest's memory in MiB")
	timeout := fs.Duration("timeout", 15*time.Minute, "the most the guest may take, boot to end marker")
	keep := fs.String("console-log", "", "also write the guest's whole serial console to this file")
	verbose := fs.Bool("v", false, "print every output line of the tests, not only one line per test")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	bins, err := parseBinaries(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "sluice-kernel-test: %v\n", err)
		return 2
	}
	if *kernel == "" {
		if *kernel, err = newestKernel(); err != nil {
			fmt.Fprintf(stderr, "sluice-kernel-test: %v\n", err)
			return 2
		}
	}
	release := strings.TrimPrefix(filepath.Base(*kernel), "vmlinuz-")
	work, err := os.MkdirTemp("", "sluice-kernel-test-")
	if err != nil {
		fmt.Fprintf(stderr, "sluice-kernel-test: %v\n", err)
		return 2
	}
	defer os.RemoveAll(work)
	initrd := filepath.Join(work, "initrd.cpio.gz")
	if err := buildInitramfs(initrd, *busybox, filepath.Join("/lib/modules", release), bins); err != nil {
		fmt.Fprintf(stderr, "sluice-kernel-test: build the initramfs: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "booting %s under qemu (TCG, 1 vCPU, %d MiB) with %d test binaries; at most %s\n", filepath.Base(*kernel), *memory, len(bins), *timeout)

	console, err := boot(ctx, *qemu, *kernel, initrd, *memory, *timeout, *keep)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-kernel-test: %v\n", err)
	}
	res := summarize(ctx, console, bins, stdout, *verbose)
	fmt.Fprintf(stdout, "%d passed, %d failed\n", res.passed, res.failed)
	for _, p := range res.problems {
		fmt.Fprintf(stdout, "FAIL: %s\n", p)
	}
	if res.failed > 0 || len(res.problems) > 0 {
		return 1
	}
	return 0
}

func parseBinaries(args []string) ([]binary, error) {
	if len(args) == 0 {
		return nil, errors.New("no test binaries: give NAME=BINARY[:ARGS] ...")
	}
	var bins []binary
	for _, a := range args {
		name, rest, ok := strings.Cut(a, "=")
		if !ok || name == "" || strings.ContainsAny(name, " /:") {
			return nil, fmt.Errorf("%q: want NAME=BINARY[:ARGS], NAME without spaces, slashes or colons", a)
		}
		path, argv, _ := strings.Cut(rest, ":")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		bins = append(bins, binary{name: name, path: path, args: strings.Fields(argv)})
	}
	return bins, nil
}

func newestKernel() (string, error) {
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		return "", errors.New("no /boot/vmlinuz-*: apt-get install --no-install-recommends linux-image-amd64 (make test-kernel does)")
	}
	slices.Sort(ks)
	return ks[len(ks)-1], nil
}

// initScript is the guest's /init. Each binary runs in its own /tmp
// directory; its lines go to the console prefixed, so that kernel messages
// between them are told apart.
func initScript(bins []binary, mods []string) string {
	var b strings.Builder
	b.WriteString(`#!` + bbDir + `/sh
` + bbDir + `/busybox --install -s ` + bbDir + `
export PATH=` + bbDir + `
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o size=8g tmp /tmp
chmod 1777 /tmp
mount -t tmpfs run /run
mkdir -p /run/netns /var
ln -s /run /var/run
hostname sluice-guest
echo 0 > /proc/sys/kernel/printk 2>/dev/null
ip link set lo up
`)
	for _, m := range mods {
		fmt.Fprintf(&b, "insmod /modules/%s || echo '%smodules 1 insmod %s failed'\n", m, markExit, m)
	}
	// The shares: /usr read-only (cache=loose: nothing changes it while
	// the guest runs), /etc read-only under a tmpfs overlay. Then what
	// FRR needs beside them: the guest's own hostname and hosts (frr-reload
	// fails on a hostname of "(none)"), and its run, log and state
	// directories owned by user frr.
	opts := "trans=virtio,version=9p2000.L,msize=262144,ro"
	fmt.Fprintf(&b, "mkdir -p /run/host-etc /run/etc\n")
	for _, sh := range shares {
		dir := sh.path
		if sh.tag == "etc" {
			dir = "/run/host-etc"
		}
		cache := ""
		if sh.tag == "usr" {
			cache = ",cache=loose"
		}
		fmt.Fprintf(&b, "mount -t 9p -o %s%s %s %s || echo '%sshare 1 mount %s failed'\n", opts, cache, sh.tag, dir, markExit, sh.path)
	}
	fmt.Fprintf(&b, `mount -t tmpfs etc /run/etc && mkdir /run/etc/upper /run/etc/work &&
  mount -t overlay overlay -o lowerdir=/run/host-etc,upperdir=/run/etc/upper,workdir=/run/etc/work /etc ||
  echo '%sshare 1 overlay on /etc failed'
echo sluice-guest > /etc/hostname
printf '127.0.0.1 localhost sluice-guest\n::1 localhost\n' > /etc/hosts
mkdir -p /run/frr /var/log/frr /var/lib/frr /var/tmp
chown frr:frr /run/frr /var/log/frr /var/lib/frr
chmod 1777 /var/tmp
`, markExit)
	for _, bin := range bins {
		args := strings.Join(append([]string{"-test.v=test2json", "-test.timeout=10m"}, quoteAll(bin.args)...), " ")
		fmt.Fprintf(&b, "mkdir -p /tmp/%[1]s && cd /tmp/%[1]s\n", bin.name)
		fmt.Fprintf(&b, "PATH=%[3]s TMPDIR=/tmp/%[1]s SLUICE_KERNEL_VRFS=required SLUICE_REQUIRE_FRR=1 /tests/%[1]s %[2]s > /tmp/%[1]s.out 2>&1\n", bin.name, args, guestPath)
		fmt.Fprintf(&b, "rc=$?\nsed 's/^/%s%s /' /tmp/%s.out\necho \"%s%s $rc\"\ncd /\n", markOut, bin.name, bin.name, markExit, bin.name)
	}
	b.WriteString("echo " + markDone + "\nsync\npoweroff -f\n")
	return b.String()
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

// buildInitramfs writes a gzipped newc cpio archive with busybox as /bbin/sh,
// the modules the tests need (and theirs) and the test binaries.
func buildInitramfs(out, busybox, modDir string, bins []binary) error {
	mods, err := resolveModules(modDir, modules)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	w := newCPIO(gz)
	// The root must be 0755 and /tmp 1777: daemons that drop privileges
	// (FRR) need both.
	for _, d := range []string{".", bbDir[1:], "proc", "sys", "dev", "tmp", "run", "modules", "tests", "etc", "usr"} {
		if err := w.dir(d, 0o755); err != nil {
			return err
		}
	}
	// The host's programs in /usr (mounted by /init) find their loader and
	// libraries where a merged-/usr Debian has them.
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := w.symlink(l, "usr/"+l); err != nil {
			return err
		}
	}
	if err := w.fileFrom(bbDir[1:]+"/busybox", busybox, 0o755); err != nil {
		return err
	}
	if err := w.symlink(bbDir[1:]+"/sh", "busybox"); err != nil {
		return err
	}
	var names []string
	for _, m := range mods {
		names = append(names, filepath.Base(m))
		if err := w.fileFrom("modules/"+filepath.Base(m), filepath.Join(modDir, m), 0o644); err != nil {
			return err
		}
	}
	for _, b := range bins {
		if err := w.fileFrom("tests/"+b.name, b.path, 0o755); err != nil {
			return err
		}
	}
	if err := w.file("etc/hosts", []byte("127.0.0.1 localhost sluice-guest\n::1 localhost\n"), 0o644); err != nil {
		return err
	}
	if err := w.file("init", []byte(initScript(bins, names)), 0o755); err != nil {
		return err
	}
	if err := w.close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

// resolveModules returns the paths (relative to modDir) of want and every
// module they depend on, dependencies first, each once, from modules.dep.
func resolveModules(modDir string, want []string) ([]string, error) {
	dep, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("%w (is linux-image-amd64 installed? make test-kernel installs it)", err)
	}
	deps := map[string][]string{} // path → its dependencies' paths
	byName := map[string]string{} // module name → path
	for _, line := range strings.Split(string(dep), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		name := strings.TrimSuffix(filepath.Base(mod), ".ko")
		byName[name] = mod
	}
	var order []string
	seen := map[string]bool{}
	var add func(path string)
	add = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		for _, d := range deps[path] {
			add(d)
		}
		order = append(order, path)
	}
	for _, name := range want {
		path, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("module %s is not in %s/modules.dep (built in, or compressed?)", name, modDir)
		}
		add(path)
	}
	return order, nil
}

// boot runs qemu until it ends or timeout passes and returns the console.
func boot(ctx context.Context, qemu, kernel, initrd string, memMiB int, timeout time.Duration, keep string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", fmt.Sprint(memMiB),
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=1",
		"-nographic", "-no-reboot", "-nic", "none")
	for _, sh := range shares {
		cmd.Args = append(cmd.Args, "-virtfs", fmt.Sprintf("local,path=%s,mount_tag=%s,security_model=none,readonly=on", sh.path, sh.tag))
	}
	var console bytes.Buffer
	out := io.Writer(&console)
	if keep != "" {
		f, err := os.Create(keep)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out = io.MultiWriter(&console, f)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return console.Bytes(), fmt.Errorf("the guest did not finish within %s", timeout)
	}
	if err != nil {
		return console.Bytes(), fmt.Errorf("qemu: %w", err)
	}
	return console.Bytes(), nil
}

type result struct {
	passed, failed int
	problems       []string
}

// event is the part of a test2json event read here.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// summarize reads the console: each binary's lines through test2json, one
// line per test, and the problems that fail the run beyond a failed test.
func summarize(ctx context.Context, console []byte, bins []binary, stdout io.Writer, verbose bool) result {
	var res result
	outputs := map[string]*bytes.Buffer{}
	exits := map[string]string{}
	done := false
	sc := bufio.NewScanner(bytes.NewReader(console))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		// The console may put a kernel message before a marker on its line.
		switch i := strings.Index(line, "@"); {
		case i < 0:
			continue
		case strings.HasPrefix(line[i:], markOut):
			name, text, _ := strings.Cut(strings.TrimPrefix(line[i:], markOut), " ")
			if outputs[name] == nil {
				outputs[name] = &bytes.Buffer{}
			}
			outputs[name].WriteString(text + "\n")
		case strings.HasPrefix(line[i:], markExit):
			name, code, _ := strings.Cut(strings.TrimPrefix(line[i:], markExit), " ")
			exits[name] = code
		case strings.HasPrefix(line[i:], markDone):
			done = true
		}
	}
	if code, ok := exits["modules"]; ok {
		res.problems = append(res.problems, "a kernel module did not load (exit "+code+")")
	}
	if code, ok := exits["share"]; ok {
		res.problems = append(res.problems, "the guest could not mount the host's /usr and /etc (exit "+code+")")
	}
	for _, b := range bins {
		evs, err := test2json(ctx, b.name, outputs[b.name])
		if err != nil {
			res.problems = append(res.problems, fmt.Sprintf("%s: read its output: %v", b.name, err))
		}
		logs := map[string]*strings.Builder{}
		for _, e := range evs {
			if e.Test == "" {
				continue
			}
			if logs[e.Test] == nil {
				logs[e.Test] = &strings.Builder{}
			}
			switch e.Action {
			case "output":
				logs[e.Test].WriteString(e.Output)
				if verbose {
					fmt.Fprintf(stdout, "    %s", e.Output)
				}
			case "pass":
				res.passed++
				fmt.Fprintf(stdout, "ok   %s %s (%.1fs)\n", b.name, e.Test, e.Elapsed)
			case "fail", "skip":
				res.failed++
				what := "FAIL"
				if e.Action == "skip" {
					what = "SKIP (a failure here: nothing may skip on this kernel)"
				}
				fmt.Fprintf(stdout, "%s %s %s (%.1fs)\n", what, b.name, e.Test, e.Elapsed)
				if !verbose {
					fmt.Fprint(stdout, indent(logs[e.Test].String()))
				}
			}
		}
		switch code, ok := exits[b.name]; {
		case !ok:
			res.problems = append(res.problems, b.name+": the guest printed no exit status for it")
		case code != "0":
			res.problems = append(res.problems, fmt.Sprintf("%s: exited %s", b.name, code))
		}
	}
	if !done {
		res.problems = append(res.problems, "the guest never printed its end marker ("+markDone+"): it hung, panicked or ran out of time; rerun with --console-log FILE")
	}
	return res
}

// test2json turns a binary's -test.v=test2json output into events.
func test2json(ctx context.Context, name string, out *bytes.Buffer) ([]event, error) {
	if out == nil {
		return nil, errors.New("no output at all")
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "test2json", "-t", "-p", name)
	cmd.Stdin = out
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go tool test2json: %w", err)
	}
	var evs []event
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var e event
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			return evs, nil
		} else if err != nil {
			return evs, err
		}
		evs = append(evs, e)
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
