package charttest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// packages are the sluice binaries the chart runs, by image name. They are
// built from the workspace (go.work), so the chart is checked against the
// flags and config file the code has now.
var packages = map[string]string{
	"sluice-configurator":        "github.com/sluicehq/sluice/services/configurator/cmd/sluice-configurator",
	"sluice-rollout-coordinator": "github.com/sluicehq/sluice/services/rollout-coordinator/cmd/sluice-rollout-coordinator",
	"sluice-reaper":              "github.com/sluicehq/sluice/services/reaper/cmd/sluice-reaper",
	"sluice-agent":               "github.com/sluicehq/sluice/services/agent/cmd/sluice-agent",
}

var (
	binDir   string
	builds   sync.Map // binary name → *build
	startUp  = 20 * time.Second
	stopWait = 10 * time.Second
)

type build struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-chart-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary builds the named sluice binary once per test run.
func binary(t *testing.T, name string) string {
	t.Helper()
	pkg, ok := packages[name]
	if !ok {
		t.Fatalf("the chart runs image %s, which is no sluice binary this test knows", name)
	}
	v, _ := builds.LoadOrStore(name, &build{})
	b := v.(*build)
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s (run inside the sluice workspace, go.work): %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// TestChart_BinariesAcceptRenderedArgs starts every container the chart
// renders as a local process — its binary built from the workspace, with
// the rendered arguments and environment, its mounted ConfigMaps written to
// temporary directories — against a NATS URL where nothing listens. A flag
// the binary does not know, or an agent config file it refuses, ends the
// process at once (exit 2); a process that accepts them serves /healthz on
// --http-addr, is not ready (/readyz) while NATS is away, and stops
// cleanly on SIGTERM.
func TestChart_BinariesAcceptRenderedArgs(t *testing.T) {
	for _, f := range valuesFiles {
		objs, _ := render(t, f)
		for _, key := range objs.keys() {
			spec, ok := podSpec(objs[key])
			if !ok {
				continue
			}
			for _, c := range spec.Containers {
				t.Run(name(f)+"/"+key+"/"+c.Name, func(t *testing.T) {
					runContainer(t, objs, spec, c)
				})
			}
		}
	}
}

func runContainer(t *testing.T, objs objects, spec corev1.PodSpec, c corev1.Container) {
	image := c.Image[strings.LastIndex(c.Image, "/")+1:]
	image, _, _ = strings.Cut(image, ":")
	bin := binary(t, image)

	mounts := mountDirs(t, objs, spec, c)
	httpPort := freePort(t)
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = "test-node"
		case e.ValueFrom != nil:
			t.Fatalf("env %s: valueFrom %+v is not simulated here", e.Name, e.ValueFrom)
		default:
			env[e.Name] = e.Value
		}
	}
	// Nothing listens there: the process must wait for NATS, not fail.
	env["SLUICE_NATS_URL"] = fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))

	var args []string
	for _, a := range c.Args {
		a = expandEnv(a, env)
		if strings.HasPrefix(a, "--http-addr=") {
			a = fmt.Sprintf("--http-addr=127.0.0.1:%d", httpPort)
		}
		args = append(args, mounts.rewrite(a))
	}

	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	deadline := time.After(startUp)
	for {
		if code, _ := httpGet(base + "/healthz"); code == http.StatusOK {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("%s %s exited (%v) instead of serving /healthz:\n%s", image, strings.Join(args, " "), err, stderr.String())
		case <-deadline:
			t.Fatalf("%s %s: no /healthz on %s within %s:\n%s", image, strings.Join(args, " "), base, startUp, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if code, body := httpGet(base + "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without NATS = %d %q, want 503", code, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("%s stopped with %v on SIGTERM, want exit 0:\n%s", image, err, stderr.String())
		}
	case <-time.After(stopWait):
		t.Errorf("%s did not stop within %s of SIGTERM:\n%s", image, stopWait, stderr.String())
	}
}

// mounts maps a container's mount paths to local directories.
type mounts []struct{ path, dir string }

// rewrite points paths under a mount at the local directory, in one pass
// (a local directory may itself lie under a mount path such as /tmp).
func (m mounts) rewrite(arg string) string {
	var pairs []string
	for _, mt := range m {
		pairs = append(pairs, mt.path, mt.dir)
	}
	return strings.NewReplacer(pairs...).Replace(arg)
}

// mountDirs makes a directory for each of c's mounts, holding the files of
// the ConfigMap mounted there when the chart renders it.
func mountDirs(t *testing.T, objs objects, spec corev1.PodSpec, c corev1.Container) mounts {
	t.Helper()
	var m mounts
	for _, vm := range c.VolumeMounts {
		dir := t.TempDir()
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := objs["ConfigMap/"+v.ConfigMap.Name].(*corev1.ConfigMap)
			if !ok {
				continue // not the chart's (e.g. the operator's scripts): empty here
			}
			for file, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		m = append(m, struct{ path, dir string }{vm.MountPath, dir})
	}
	// Longest first, so /a/b is rewritten before /a.
	sort.Slice(m, func(i, j int) bool { return len(m[i].path) > len(m[j].path) })
	return m
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandEnv expands $(VAR) as the kubelet does in args.
func expandEnv(s string, env map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
