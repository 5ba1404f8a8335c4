package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// baselineRelease is the commit whose agents are the oldest the control
// plane supports, and whose binaries the upgrade tests upgrade from
// (docs/deploy.md, "Version skew and upgrades").
const baselineRelease = "8c96385"

// todaysVersion is the version today's binaries announce in these tests
// (their presence and instance records), to tell them from the baseline's.
const todaysVersion = "today"

// releaseCommands are the binaries of a release, by package: the agent
// and the three services.
var releaseCommands = []string{
	"./services/agent/cmd/sluice-agent",
	"./services/configurator/cmd/sluice-configurator",
	"./services/reaper/cmd/sluice-reaper",
	"./services/rollout-coordinator/cmd/sluice-rollout-coordinator",
}

// release is one build of sluice's binaries.
type release struct {
	version string // what its binaries announce
	dir     string // where they are
}

func (r release) bin(name string) string { return filepath.Join(r.dir, name) }

// goBuild builds releaseCommands in the module (or workspace) at src into
// dir, announcing version.
func goBuild(src, dir, version string) error {
	args := append([]string{"build", "-o", dir + string(filepath.Separator), "-ldflags",
		"-X github.com/sluicehq/sluice/pkg/cmdutil.Version=" + version + " -X main.version=" + version}, releaseCommands...)
	build := exec.Command("go", args...)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", src, err, out)
	}
	return nil
}

// baselineBinaries returns the binaries of baselineRelease. They are built
// from this repository's history (git archive into a temporary directory,
// go build there: minutes, cold) once, and kept in the user's cache
// directory ($XDG_CACHE_HOME/sluice/releases/8c96385, else
// ~/.cache/...), where later runs take them; a commit's code never changes,
// so the cache needs no invalidation (delete the directory to rebuild).
func baselineBinaries(t *testing.T) release {
	t.Helper()
	rel := release{version: baselineRelease}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("the baseline binaries' cache: %v (set XDG_CACHE_HOME or HOME)", err)
	}
	rel.dir = filepath.Join(cache, "sluice", "releases", baselineRelease)
	if haveAll(rel.dir) {
		return rel
	}
	if err := os.MkdirAll(filepath.Dir(rel.dir), 0o755); err != nil {
		t.Fatal(err)
	}
	src, out := t.TempDir(), t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$REPO" archive --format=tar "$COMMIT" | tar -x -C "$DEST"`)
	archive.Env = append(os.Environ(), "REPO=../..", "COMMIT="+baselineRelease, "DEST="+src)
	if b, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s of this repository (the test needs its git history): %v\n%s", baselineRelease, err, b)
	}
	t.Logf("building the binaries of %s (cached in %s afterwards)", baselineRelease, rel.dir)
	if err := goBuild(src, out, baselineRelease); err != nil {
		t.Fatalf("build the binaries of %s: %v", baselineRelease, err)
	}
	// A rename is atomic: the cache holds every binary or none. Another
	// test process may have put them there meanwhile; theirs do as well.
	if err := os.Rename(out, rel.dir); err != nil && !haveAll(rel.dir) {
		t.Fatalf("cache the binaries of %s: %v", baselineRelease, err)
	}
	return rel
}

// todaysBinaries builds this tree's binaries, once per test binary, into a
// directory of the user's cache named for this tree
// ($XDG_CACHE_HOME/sluice/today-<hash of its path>): go build rewrites a
// binary there only when its code changed, so after the first build a run
// takes a second, not the tens of seconds four links take.
func todaysBinaries(t *testing.T) release {
	t.Helper()
	today.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			today.err = err
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			today.err = fmt.Errorf("today's binaries' cache: %w (set XDG_CACHE_HOME or HOME)", err)
			return
		}
		sum := sha256.Sum256([]byte(root))
		today.rel = release{version: todaysVersion, dir: filepath.Join(cache, "sluice", "today-"+hex.EncodeToString(sum[:6]))}
		today.err = goBuild(root, today.rel.dir, todaysVersion)
	})
	if today.err != nil {
		t.Fatalf("build today's binaries: %v", today.err)
	}
	return today.rel
}

// today is todaysBinaries' build, shared by the tests of one run.
var today struct {
	once sync.Once
	rel  release
	err  error
}

func haveAll(dir string) bool {
	for _, c := range releaseCommands {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(c))); err != nil {
			return false
		}
	}
	return true
}

// fleet is a control plane and agents, each a process of some release's
// binary, on one nats-server: what a rolling upgrade replaces one process
// at a time. Members are named "coordinator-a", "coordinator-b",
// "configurator", "reaper" and the node names (nodeName).
type fleet struct {
	t   *testing.T
	env *natstest.Env
	dir string // the agents' state directories live under it
	// nodeLease, if set, is today's coordinators' --node-lease: the
	// baseline's agents start only at their built-in 15 s (docs/deploy.md).
	nodeLease time.Duration
	mu        sync.Mutex
	running   map[string]*member
	stopped   []*member // their output is shown when the test fails
	labels    map[string]map[string]string
}

type member struct {
	name string
	rel  release
	p    *testproc.Process
}

func newFleet(t *testing.T, env *natstest.Env) *fleet {
	f := &fleet{t: t, env: env, dir: t.TempDir(), running: map[string]*member{}, labels: map[string]map[string]string{}}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		all := f.stopped
		for _, name := range slices.Sorted(maps.Keys(f.running)) {
			f.running[name].p.Kill()
			all = append(all, f.running[name])
		}
		if t.Failed() {
			for _, m := range all {
				t.Logf("%s (%s) wrote:\n%s", m.name, m.rel.version, m.p.Output())
			}
		}
	})
	return f
}

// command is how member name of release rel is started.
func (f *fleet) command(name string, rel release) *exec.Cmd {
	common := []string{"--server", f.env.URL, "--log-level", "debug"}
	switch name {
	case "configurator":
		return exec.Command(rel.bin("sluice-configurator"), common...)
	case "reaper":
		return exec.Command(rel.bin("sluice-reaper"), common...)
	case "coordinator-a", "coordinator-b":
		args := append(common, "--instance", name+"-"+rel.version)
		if rel.version != baselineRelease && f.nodeLease != 0 {
			args = append(args, "--node-lease", f.nodeLease.String())
		}
		return exec.Command(rel.bin("sluice-rollout-coordinator"), args...)
	}
	labels := f.labels[name]
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return exec.Command(rel.bin("sluice-agent"), append(common, "--node", name,
		"--state-dir", filepath.Join(f.dir, name), "--labels", strings.Join(pairs, ","))...)
}

// start starts member name on release rel; agents are named nodeName(i)
// and labelled nodeLabels(i).
func (f *fleet) start(name string, rel release) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(name, "node-") {
		var i int
		if _, err := fmt.Sscanf(name, "node-%d", &i); err != nil {
			f.t.Fatalf("agent name %q: want node-NN", name)
		}
		f.labels[name] = nodeLabels(i - 1)
	}
	p, err := testproc.Start(f.command(name, rel))
	if err != nil {
		f.t.Fatal(err)
	}
	f.running[name] = &member{name: name, rel: rel, p: p}
}

// stop stops member name as a rolling restart does (SIGTERM) and fails the
// test unless it exits cleanly and promptly.
func (f *fleet) stop(name string) {
	f.t.Helper()
	f.mu.Lock()
	m := f.running[name]
	delete(f.running, name)
	f.stopped = append(f.stopped, m)
	f.mu.Unlock()
	// margin: a service stops in milliseconds; an agent may finish an apply first.
	if !m.p.Stop(20 * time.Second) {
		f.t.Errorf("%s (%s) did not stop cleanly on SIGTERM (%v); it wrote:\n%s", name, m.rel.version, m.p.State(), m.p.Output())
	}
}

// waitUp waits until member name of release rel has announced itself: an
// agent's presence, a service's instance record, with rel's version.
func (f *fleet) waitUp(name string, rel release) {
	f.t.Helper()
	ctx := context.Background()
	if strings.HasPrefix(name, "node-") {
		nodes := store.New(f.env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
		// margin: an agent registers within a second of starting.
		natstest.Eventually(f.t, 60*time.Second, name+"'s agent ("+rel.version+") to register", func() bool {
			e, err := nodes.Get(ctx, name)
			return err == nil && e.Value.GetAgentVersion() == rel.version
		})
		return
	}
	component, instance := strings.TrimSuffix(strings.TrimSuffix(name, "-a"), "-b"), ""
	if component == "coordinator" {
		component, instance = contract.ComponentCoordinator, name+"-"+rel.version
	}
	instances := store.New(f.env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	// margin: a service writes its instance record within a second of starting.
	natstest.Eventually(f.t, 60*time.Second, name+" ("+rel.version+") to announce its instance", func() bool {
		all, err := instances.List(ctx, component+".>")
		if err != nil {
			return false
		}
		for _, e := range all {
			if e.Value.GetVersion() == rel.version && (instance == "" || e.Value.GetInstance() == instance) {
				return true
			}
		}
		return false
	})
}

// waitLeader waits until coordinator name of release rel holds the
// coordinator lease.
func (f *fleet) waitLeader(name string, rel release) {
	f.t.Helper()
	leases := store.New(f.env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	// margin: a standby takes a released lease over within a second or
	// two; one that expired, within the lease (10 s for the baseline's).
	natstest.Eventually(f.t, 60*time.Second, name+" ("+rel.version+") to lead", func() bool {
		e, err := leases.Get(context.Background(), contract.LeaseCoordinator)
		return err == nil && e.Value.GetHolder() == name+"-"+rel.version
	})
}

// restart replaces member name by the binary of release rel and waits
// until it is up.
func (f *fleet) restart(name string, rel release) {
	f.t.Helper()
	f.stop(name)
	f.start(name, rel)
	f.waitUp(name, rel)
}

// bind opens env's bucket handles once the control plane has created every
// bucket: a bare server has none until its services start.
func (f *fleet) bind() {
	f.t.Helper()
	// margin: the services create the buckets within a second of starting.
	natstest.Eventually(f.t, 60*time.Second, "the control plane to create every bucket", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := buckets.BindAll(ctx, f.env.JS)
		f.env.Buckets = b
		return err == nil
	})
}

// system is the view of f the in-process suite's assertions take
// (assertInvariants, assertFleetRuns).
func (f *fleet) system() *system {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &system{t: f.t, env: f.env, dir: f.dir, labels: maps.Clone(f.labels)}
}
