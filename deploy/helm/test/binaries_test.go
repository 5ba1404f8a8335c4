package charttest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
	"github.com/sluicehq/sluice/pkg/cmdutil"
)

// packages are the sluice binaries the chart runs, by image name, and the
// CLI, which makes the credentials the auth values mount. They are built
// from the workspace (go.work), so the chart is checked against the flags,
// config file and credentials the code has now.
var packages = map[string]string{
	"sluice-configurator":        "github.com/sluicehq/sluice/services/configurator/cmd/sluice-configurator",
	"sluice-rollout-coordinator": "github.com/sluicehq/sluice/services/rollout-coordinator/cmd/sluice-rollout-coordinator",
	"sluice-reaper":              "github.com/sluicehq/sluice/services/reaper/cmd/sluice-reaper",
	"sluice-agent":               "github.com/sluicehq/sluice/services/agent/cmd/sluice-agent",
	"sluice":                     "github.com/sluicehq/sluice/cmd/sluice",
}

// testNode is the Kubernetes node name every simulated pod runs on.
const testNode = "test-node"

// margin: startUp and stopWait end polls that return as soon as the
// process serves or stops; they only bound one that never does.
var (
	binDir   string
	builds   sync.Map // binary name → *build
	startUp  = 60 * time.Second
	stopWait = 30 * time.Second
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
// the rendered arguments and environment, its mounted ConfigMaps, Secrets
// and host files written to temporary directories (credentials made by
// `sluice creds`, see credentialFixtures) — against a NATS URL where
// nothing listens. A flag the binary does not know, an agent config file
// it refuses, or a credentials or certificate file that is missing or
// malformed ends the process at once (exit 2); a process that accepts them
// serves /healthz on --http-addr, connects as its own role's user (its
// log), is not ready (/readyz) while NATS is away, and stops cleanly on
// SIGTERM.
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
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = testNode
		case e.ValueFrom != nil:
			t.Fatalf("env %s: valueFrom %+v is not simulated here", e.Name, e.ValueFrom)
		default:
			// Files named in the environment (SLUICE_NATS_CREDS, …) are
			// where their mounts are here.
			env[e.Name] = mounts.rewrite(e.Value)
		}
	}
	// Nothing listens there: the process must wait for NATS, not fail.
	env["SLUICE_NATS_URL"] = "nats://" + testaddr.Held(t)

	var args []string
	for _, a := range c.Args {
		a = expandEnv(a, env)
		if strings.HasPrefix(a, "--http-addr=") {
			// Port 0, the address read from the log: a port found free and
			// closed first could be taken by another process meanwhile.
			a = "--http-addr=127.0.0.1:0"
		}
		args = append(args, mounts.rewrite(a))
	}

	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	proc, err := testproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)

	base := ""
	deadline := time.After(startUp)
	for {
		if base == "" {
			base = cmdutil.ServedAt(proc.Output())
		}
		if base != "" {
			if code, _ := httpGet(base + "/healthz"); code == http.StatusOK {
				break
			}
		}
		select {
		case <-proc.Exited():
			t.Fatalf("%s %s exited (%v) instead of serving /healthz:\n%s", image, strings.Join(args, " "), proc.State(), proc.Output())
		case <-deadline:
			t.Fatalf("%s %s: no /healthz on %q (the address its log says) within %s:\n%s", image, strings.Join(args, " "), base, startUp, proc.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if code, body := httpGet(base + "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without NATS = %d %q, want 503", code, body)
	}
	if env["SLUICE_NATS_CREDS"] != "" {
		checkConnectsAs(t, c.Name, env, proc)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.Exited():
		if !proc.State().Success() {
			t.Errorf("%s stopped with %v on SIGTERM, want exit 0:\n%s", image, proc.State(), proc.Output())
		}
	case <-time.After(stopWait):
		t.Errorf("%s did not stop within %s of SIGTERM:\n%s", image, stopWait, proc.Output())
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
// the ConfigMap mounted there when the chart renders it, or of the Secrets
// credentialFixtures holds; a hostPath of type File is mounted as the
// file nodeFiles or credentialFixtures holds for that path on the node.
func mountDirs(t *testing.T, objs objects, spec corev1.PodSpec, c corev1.Container) mounts {
	t.Helper()
	var m mounts
	for _, vm := range c.VolumeMounts {
		dir := t.TempDir()
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				cm, ok := objs["ConfigMap/"+v.ConfigMap.Name].(*corev1.ConfigMap)
				if !ok {
					continue // not the chart's (e.g. the operator's scripts): empty here
				}
				for file, data := range cm.Data {
					if err := os.WriteFile(filepath.Join(dir, file), []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			case v.Secret != nil:
				writeSecret(t, dir, v.Secret.SecretName, v.Secret.Items)
			case v.Projected != nil:
				for _, src := range v.Projected.Sources {
					if src.Secret != nil {
						writeSecret(t, dir, src.Secret.Name, src.Secret.Items)
					}
				}
			case v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathFile:
				data, ok := nodeFiles[v.HostPath.Path]
				if !ok {
					data, ok = credentialFixtures(t).hostFiles[v.HostPath.Path]
				}
				if !ok {
					t.Fatalf("volume %s: hostPath file %s on the node is not simulated here", v.Name, v.HostPath.Path)
				}
				// The mount is the file itself: map its path to a file.
				dir = filepath.Join(dir, filepath.Base(vm.MountPath))
				if err := os.WriteFile(dir, data, 0o440); err != nil {
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

func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second} // margin: the process answers at once
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// writeSecret writes into dir the keys of the Secret name that items
// project (every key when there are none), as the kubelet does. A Secret
// credentialFixtures does not hold is left empty, like an operator's
// ConfigMap; a key it lacks fails, as the kubelet refuses the mount.
func writeSecret(t *testing.T, dir, name string, items []corev1.KeyToPath) {
	t.Helper()
	secret, ok := credentialFixtures(t).secrets[name]
	if !ok {
		return
	}
	if items == nil {
		for key := range secret {
			items = append(items, corev1.KeyToPath{Key: key, Path: key})
		}
	}
	for _, it := range items {
		data, ok := secret[it.Key]
		if !ok {
			t.Fatalf("Secret %s has no key %s (it has %v)", name, it.Key, slices.Sorted(maps.Keys(secret)))
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), data, 0o440); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeFiles are the files on the node, by host path, that values files
// other than testdata/auth-tls.yaml name: the node's own netlink settings
// of testdata/agent-netlink.yaml (its --netlink-file, read strictly and
// checked at the agent's start).
var nodeFiles = map[string][]byte{
	"/etc/sluice/netlink.yaml": []byte("vtepAddress: 192.0.2.11\nnodeAddresses: {100: 10.100.0.11/24, 200: \"fd00:200::11/64\"}\n"),
}

// credentials are the Secrets (name → key → content) and the files on the
// node (host path → content) that testdata/auth-tls.yaml names.
type credentials struct {
	secrets   map[string]map[string][]byte
	hostFiles map[string][]byte
}

var (
	credsOnce sync.Once
	creds     credentials
	credsErr  error
)

// credentialFixtures makes, once per run, what an operator makes before
// installing with testdata/auth-tls.yaml, as docs/deploy.md says: `sluice
// creds init`, a user per service role and one for testNode, and `sluice
// creds tls`; the services' Secret holds exactly the files `issue` wrote,
// under their names.
func credentialFixtures(t *testing.T) credentials {
	t.Helper()
	bin := binary(t, "sluice")
	credsOnce.Do(func() {
		dir := filepath.Join(binDir, "sluice-creds")
		run := func(args ...string) string {
			if credsErr != nil {
				return ""
			}
			out, err := exec.Command(bin, append(args, "--dir", dir)...).CombinedOutput()
			if err != nil {
				credsErr = fmt.Errorf("sluice %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		read := func(rel string) []byte {
			if credsErr != nil {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(dir, rel))
			if err != nil {
				credsErr = err
			}
			return b
		}
		run("creds", "init")
		for _, role := range []string{"configurator", "coordinator", "reaper"} {
			run("creds", "issue", role)
		}
		run("creds", "issue", "node", "--node", testNode)
		// The server certificate serves for client auth too: the client
		// certificate here.
		run("creds", "tls", "--hosts", "nats.example.com")
		creds = credentials{
			secrets: map[string]map[string][]byte{
				"sluice-nats-creds": {
					"configurator.creds": read("users/configurator.creds"),
					"coordinator.creds":  read("users/coordinator.creds"),
					"reaper.creds":       read("users/reaper.creds"),
				},
				"sluice-nats-ca":     {"ca.crt": read("tls/ca.pem")},
				"sluice-nats-client": {"tls.crt": read("tls/server.pem"), "tls.key": read("tls/server.key")},
			},
			hostFiles: map[string][]byte{"/etc/sluice/node/agent.creds": read("users/" + testNode + ".creds")},
		}
	})
	if credsErr != nil {
		t.Fatal(credsErr)
	}
	return creds
}

// users are the NATS users each container must connect as: its own role's,
// the agent its node's.
var users = map[string]string{
	"configurator":        "configurator",
	"rollout-coordinator": "coordinator",
	"reaper":              "reaper",
	"agent":               testNode,
}

// checkConnectsAs reads the process's "connecting to NATS" log line and
// checks it names the credentials file from the environment, the user of
// the container's role and, when a CA is set, TLS.
func checkConnectsAs(t *testing.T, container string, env map[string]string, proc *testproc.Process) {
	t.Helper()
	want := fmt.Sprintf("creds %s (user %s)", env["SLUICE_NATS_CREDS"], users[container])
	if env["SLUICE_NATS_TLS_CA"] != "" {
		want += ", TLS"
	}
	deadline := time.After(startUp)
	for {
		for _, line := range strings.Split(proc.Output(), "\n") {
			var entry struct{ Message, Auth string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == "connecting to NATS" {
				if entry.Auth != want {
					t.Errorf("connects with %q, want %q", entry.Auth, want)
				}
				return
			}
		}
		select {
		case <-proc.Exited():
			t.Fatalf("exited (%v) before connecting:\n%s", proc.State(), proc.Output())
		case <-deadline:
			t.Fatalf("no \"connecting to NATS\" line within %s:\n%s", startUp, proc.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
