package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// startSystemWith runs sluice dev with n agents that run checks, and no
// examples, on a fresh data directory and a free port, stopped at cleanup.
func startSystemWith(t *testing.T, agents int, checks ...string) *dev.System {
	t.Helper()
	s, err := dev.Start(context.Background(), dev.Options{
		DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: agents, Stderr: io.Discard, CheckCmds: checks,
	})
	if err != nil {
		t.Fatalf("start sluice dev: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

// openBuckets binds every bucket of the system at url.
func openBuckets(t *testing.T, url string) *buckets.Set {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buckets.BindAll(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitApplying waits until node's agent reports it is applying.
func waitApplying(t *testing.T, status *store.Store[*sluicev1.NodeStatus], node string) {
	t.Helper()
	// margin: the poll ends as soon as the agent reports; 60s covers a
	// cold start of the system on a loaded machine many times over.
	natstest.Eventually(t, 60*time.Second, node+" to be applying", func() bool {
		st, err := status.Get(context.Background(), node)
		return err == nil && st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING
	})
}

// heldCheck is a health check that holds a node's apply until the test
// creates release-<node> in dir.
func heldCheck(dir string) string {
	return fmt.Sprintf(`while [ ! -f %s/release-"$SLUICE_NODE" ]; do sleep 0.05; done`, dir)
}

func release(t *testing.T, dir string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		if err := os.WriteFile(filepath.Join(dir, "release-"+n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// running is a command started with startSluice: its output so far, and its
// exit code once it ended.
type running struct {
	out, err lockedBuffer
	done     chan int
}

// startSluice runs the command line against url in the background.
func startSluice(url string, args ...string) *running {
	r := &running{done: make(chan int, 1)}
	go func() {
		r.done <- Run(context.Background(), append([]string{"--server", url}, args...), Streams{Out: &r.out, Err: &r.err}, "test")
	}()
	return r
}

// wait waits for the command to end and returns its exit code.
func (r *running) wait(t *testing.T, what string) int {
	t.Helper()
	select {
	case code := <-r.done:
		return code
	case <-time.After(60 * time.Second): // margin: it ends at once once what it waits for happened
		t.Fatalf("%s did not return:\n%s%s", what, r.out.String(), r.err.String())
		return 0
	}
}

// heldRollout starts sluice dev with agents whose applies wait for the
// test (heldCheck on gate), applies tenantA one node at a time and waits
// until node-01 is applying: a rollout that runs until the test releases
// its nodes.
func heldRollout(t *testing.T, agents int) (gate, url string, b *buckets.Set, status *store.Store[*sluicev1.NodeStatus]) {
	t.Helper()
	gate = t.TempDir()
	url = startSystemWith(t, agents, heldCheck(gate)).URL()
	b = openBuckets(t, url)
	if code, _, stderr := sluice(t, url, "apply", "-f", writeFile(t, "a.yaml", tenantA), "--max-parallel", "1"); code != 0 {
		t.Fatalf("apply: exit %d: %s", code, stderr)
	}
	status = store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	waitApplying(t, status, "node-01")
	return gate, url, b, status
}

// pause --wait returns only once the apply in flight settled; while paused
// no node starts and the configurator refuses applies; resume carries on.
func TestPause_Wait_ReturnsOnceInFlightNodesSettled_AndNothingStartsUntilResume(t *testing.T) {
	gate, url, b, status := heldRollout(t, 3)
	desired := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	ctx := context.Background()

	p := startSluice(url, "pause", "--reason", "maintenance", "--wait", "--timeout", "60s")
	// Release only once every instance has seen the pause and the command
	// waits for node-01's apply: released sooner, the coordinator could
	// start node-02 before it saw the pause, and the command might never
	// have seen node-01 applying. margin: the poll ends as soon as it holds.
	natstest.Eventually(t, 60*time.Second, "pause --wait to wait for node-01's apply, every instance having seen the pause", func() bool {
		select {
		case code := <-p.done:
			t.Fatalf("pause --wait returned while node-01's apply runs: exit %d\n%s%s", code, p.out.String(), p.err.String())
		default:
		}
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, "agent node-01 (applying fingerprint") && !strings.Contains(l, "has not seen it yet") {
				return true
			}
		}
		return false
	})
	release(t, gate, "node-01", "node-02", "node-03") // whatever starts from now on finishes at once
	code := p.wait(t, "pause --wait after node-01 settled")
	if stdout := p.out.String(); code != 0 || !strings.Contains(stdout, "every live instance acknowledged generation 1") {
		t.Fatalf("pause --wait: exit %d, want 0\n%s%s", code, stdout, p.err.String())
	}
	st, err := status.Get(ctx, "node-01")
	if err != nil || st.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("node-01 after pause --wait: %v %v; want its apply settled (Provisioned)", st.Value, err)
	}
	// Nothing may start. A coordinator that ignored the pause would have
	// written node-02 when node-01 settled, before the pause returned; the
	// second more lets a write already on its way land.
	time.Sleep(time.Second)
	for _, n := range []string{"node-02", "node-03"} {
		if d, err := desired.Get(ctx, contract.DesiredKey(n)); err == nil {
			t.Fatalf("%s got a desired config while paused: %v", n, d.Value)
		}
	}
	code, stdout, _ := sluice(t, url, "get", "pause")
	if code != 0 || !strings.Contains(stdout, "paused (generation 1) by") || !strings.Contains(stdout, "maintenance") ||
		strings.Contains(stdout, "not yet") || strings.Count(stdout, "paused (generation 1)") < 7 {
		t.Fatalf("get pause: exit %d, want the request and 6 instances (coordinator, configurator, reaper, 3 agents) at generation 1:\n%s", code, stdout)
	}
	code, stdout, _ = sluice(t, url, "rollout", "status")
	if !strings.Contains(stdout, "paused    the control plane is paused (generation 1)") {
		t.Fatalf("rollout status while the control plane is paused does not say so:\n%s", stdout)
	}
	code, _, stderr := sluice(t, url, "apply", "-f", writeFile(t, "b.yaml", strings.Replace(tenantA, "100}", "101}", 1)))
	if code == 0 || !strings.Contains(stderr, "the control plane is paused (generation 1)") {
		t.Fatalf("apply while paused: exit %d, want refused naming the pause: %s", code, stderr)
	}

	if code, stdout, stderr := sluice(t, url, "resume", "--wait", "--timeout", "60s"); code != 0 {
		t.Fatalf("resume --wait: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = sluice(t, url, "rollout", "status", "--watch")
	if code != 0 || !strings.Contains(stdout, "succeeded") {
		t.Fatalf("rollout after resume: exit %d\n%s%s", code, stdout, stderr)
	}
}

// rollout pause holds one rollout; the coordinator acknowledges in its
// record; rollout resume lets it finish.
func TestRolloutPause_HoldsTheRolloutUntilResumed(t *testing.T) {
	gate, url, b, status := heldRollout(t, 2)
	ctx := context.Background()
	// node-01's apply is held: the rollout runs, never paused.
	if code, stdout, stderr := sluice(t, url, "rollout", "resume"); code != 0 || !strings.Contains(stdout, "is not paused: nothing to resume") {
		t.Fatalf("rollout resume of a running rollout never paused: exit %d, want 0 saying it is not paused\n%s%s", code, stdout, stderr)
	}
	p := startSluice(url, "rollout", "pause", "--reason", "look at node-01", "--wait", "--timeout", "60s")
	// Release node-01 only once the coordinator has seen the pause: released
	// sooner, node-02 could start first, and the pause would wait for it
	// forever. margin: the poll ends as soon as it holds.
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	rollouts := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	natstest.Eventually(t, 60*time.Second, "the coordinator to see the rollout's pause", func() bool {
		ref, err := refs.Get(ctx, contract.KeyActive)
		if err != nil {
			return false
		}
		e, err := rollouts.Get(ctx, ref.Value.GetRollout())
		return err == nil && e.Value.GetPauseAck().GetSeen() >= 1
	})
	release(t, gate, "node-01")
	code := p.wait(t, "rollout pause --wait")
	if stdout := p.out.String(); code != 0 || !strings.Contains(stdout, "is paused: no node operation in flight") {
		t.Fatalf("rollout pause --wait: exit %d\n%s%s", code, stdout, p.err.String())
	}
	if code, stdout, stderr := sluice(t, url, "rollout", "pause"); code != 0 || !strings.Contains(stdout, "is already paused: paused (generation 1)") {
		t.Fatalf("rollout pause of a paused rollout: exit %d, want 0 saying it is already paused\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := sluice(t, url, "get", "rollouts"); code != 0 || !strings.Contains(stdout, "Progressing (paused)") {
		t.Fatalf("get rollouts while the rollout is paused: exit %d, want its phase shown as paused\n%s%s", code, stdout, stderr)
	}
	if st, err := status.Get(ctx, "node-01"); err != nil || st.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("node-01 once the pause was acknowledged: %v %v; want Provisioned", st.Value, err)
	}
	// node-02 may not start. A coordinator that ignored the pause would
	// have written it when node-01 settled, before the pause was
	// acknowledged; the second more lets a write already on its way land.
	time.Sleep(time.Second)
	if d, err := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).Get(ctx, contract.DesiredKey("node-02")); err == nil {
		t.Fatalf("node-02 got a desired config while the rollout was paused: %v", d.Value)
	}
	release(t, gate, "node-02")
	code, stdout, stderr := sluice(t, url, "rollout", "status")
	if code != 0 || !strings.Contains(stdout, "paused    held: no node operation in flight") || !strings.Contains(stdout, "look at node-01") {
		t.Fatalf("rollout status while paused: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr := sluice(t, url, "rollout", "resume", "--wait"); code != 0 || !(strings.Contains(stdout, "is running again") || strings.Contains(stdout, "ended Succeeded meanwhile")) {
		t.Fatalf("rollout resume --wait: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = sluice(t, url, "rollout", "status", "--watch")
	if code != 0 || !strings.Contains(stdout, "succeeded") {
		t.Fatalf("rollout after resume: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := sluice(t, url, "rollout", "pause"); code != 1 || !strings.Contains(stderr, "nothing to pause") {
		t.Fatalf("rollout pause with no rollout running: exit %d, want 1: %s", code, stderr)
	}
}

// A control/pause that cannot be read is written over by sluice pause and
// resume, with a generation above any it held: instances that acknowledged
// an earlier generation do not take the new request for an old one. Before,
// both failed ("does not decode"), and a coordinator that held as paused
// while the request was unreadable could not be resumed with sluice.
func TestPause_OverAnUnreadableRequest_WritesAHigherGeneration(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	reqs := store.New(env.Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	for gen := uint64(1); gen <= 3; gen++ { // generations 1-3 were stored and acknowledged
		b, err := store.Marshal(&sluicev1.PauseRequest{Paused: gen%2 == 1, Generation: gen})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Buckets.Control.Put(ctx, contract.KeyPause, b); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := env.Buckets.Control.Put(ctx, contract.KeyPause, []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := sluice(t, env.URL, "pause", "--reason", "over garbage")
	if code != 0 || !strings.Contains(stderr, "cannot be read") {
		t.Fatalf("sluice pause over an unreadable request: exit %d, stderr %q; want 0 and a line saying it was written over", code, stderr)
	}
	e, err := reqs.Get(ctx, contract.KeyPause)
	if err != nil || !e.Value.GetPaused() || e.Value.GetGeneration() != rev+1 || e.Value.GetGeneration() <= 3 {
		t.Fatalf("stored %v (%v); want paused at generation %d, above the 3 acknowledged", e.Value, err, rev+1)
	}
	if code, _, stderr := sluice(t, env.URL, "resume"); code != 0 {
		t.Fatalf("sluice resume: exit %d, %s", code, stderr)
	}
	if e, err := reqs.Get(ctx, contract.KeyPause); err != nil || e.Value.GetPaused() || e.Value.GetGeneration() != rev+2 {
		t.Fatalf("after resume: %v (%v); want running at generation %d", e.Value, err, rev+2)
	}
}

// A head applied while a rollout runs queues behind it: rollout status
// shows the running rollout and says the head waits for it; --watch
// follows the running one to its end, then the head's to its own.
func TestRolloutStatus_HeadQueuedBehindARunningRollout_ShowsTheRunningOneThenFollowsTheHead(t *testing.T) {
	gate, url, b, _ := heldRollout(t, 2)
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	ref, err := refs.Get(context.Background(), contract.KeyActive)
	if err != nil {
		t.Fatalf("the running rollout: %v", err)
	}
	running := ref.Value.GetRollout()
	if code, _, stderr := sluice(t, url, "apply", "-f", writeFile(t, "b.yaml", strings.Replace(tenantA, "100}", "101}", 1))); code != 0 {
		t.Fatalf("apply of a second revision while the first rolls out: exit %d: %s", code, stderr)
	}

	code, stdout, stderr := sluice(t, url, "rollout", "status")
	if code != ExitSucceeded || !strings.Contains(stdout, running) || !strings.Contains(stdout, "queued    revision") ||
		!strings.Contains(stdout, "(generation 2) is the head: its rollout starts when this one ends") || strings.Contains(stdout, "has not started yet") {
		t.Fatalf("rollout status with the head queued: exit %d, want 0, the running rollout %s and the head queued behind it:\n%s%s", code, running, stdout, stderr)
	}
	code, stdout, stderr = sluice(t, url, "rollout", "status", "-o", "json")
	if code != ExitSucceeded || !strings.Contains(stdout, `"id": "`+running+`"`) || !strings.Contains(stderr, "is the head: its rollout starts when this one ends") {
		t.Fatalf("rollout status -o json with the head queued: exit %d, want the running record and the queue on stderr:\n%s%s", code, stdout, stderr)
	}

	w := startSluice(url, "rollout", "status", "--watch")
	// margin: the poll ends as soon as the watch drew the running rollout.
	natstest.Eventually(t, 60*time.Second, "--watch to follow the running rollout", func() bool {
		return strings.Contains(w.out.String(), "following this one first") && strings.Contains(w.out.String(), running+" Progressing")
	})
	release(t, gate, "node-01", "node-02")
	code = w.wait(t, "rollout status --watch of the running rollout and then the head's")
	out := w.out.String()
	first, second := strings.Index(out, "waiting for the rollout of revision"), strings.LastIndex(out, "succeeded")
	if code != ExitSucceeded || first < 0 || second < first || strings.Count(out, "succeeded") < 2 {
		t.Fatalf("rollout status --watch: exit %d, want 0 after following the running rollout to its end and then the head's:\n%s%s", code, out, w.err.String())
	}
}
