package cli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A watch piped into a CI log says what a terminal shows: the waves, the
// bake, the leader's term and each wave's end, each once, as it happens.
func TestRolloutStatusWatch_Piped_SaysWavesBakesAndTheLeader(t *testing.T) {
	s := startSystem(t, 3)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	if code, out, _ := sluice(t, s.URL(), "rollout", "status", "--watch"); code != 0 {
		t.Fatalf("first rollout: exit %d\n%s", code, out)
	}
	changed := strings.Replace(tenantA, "tableId: 100", "tableId: 101", 1)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "b.yaml", changed), "--first-wave", "1", "--bake-time", "2s"); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	code, out, stderr := sluice(t, s.URL(), "rollout", "status", "--watch")
	if code != 0 {
		t.Fatalf("rollout status --watch: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		`(?m)^\d\d:\d\d:\d\d   led by the coordinator of term \d+$`,
		`(?m)^\d\d:\d\d:\d\d   stage wave 1, baking until \d\d:\d\d:\d\d$`,
		`(?m)^\d\d:\d\d:\d\d   wave 1 done: 1/1 provisioned$`,
		`(?m)^\d\d:\d\d:\d\d   stage wave 2`,
		`(?m)^rollout \S+ succeeded`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line %s in the piped watch:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "wave 1 done"); n != 1 {
		t.Errorf("wave 1's end said %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("escape codes in a pipe:\n%q", out)
	}
}

// syncBuffer is a bytes.Buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A watch of a rollout no coordinator leads says so at once, not after a
// silence, and says when one leads again (a failover seen in a CI log).
func TestRolloutStatusWatch_SaysWhenNoCoordinatorLeadsAndWhenOneDoesAgain(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &sluicev1.Rollout{Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Reason: "head moved to generation 5", StartedAt: timestamppb.New(time.Now().Add(-time.Hour)),
		Counts: &sluicev1.RolloutCounts{Total: 2, Pending: 2}}
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, env)
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if _, err := refs.Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: revB, Generation: 5}); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--server", env.URL, "rollout", "status", "--watch"}, Streams{Out: &out, Err: &out}, "test", time.Now)
	}()
	// margin: the line is said before the watch starts (milliseconds).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "no coordinator holds the lease; the last sign of one was 60m ago") {
		if time.Now().After(deadline) {
			t.Fatalf("no no-leader line within 10s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A coordinator takes the lease and renews it, as a leader does (the
	// server expires it one lease after the last renewal).
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	lease := &sluicev1.LeaderLease{Holder: "coord-b", Session: "s2", AcquiredAt: timestamppb.Now(), RenewedAt: timestamppb.Now()}
	rev, err := leases.Create(ctx, contract.LeaseCoordinator, lease)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			time.Sleep(contract.DefaultSettings().LeaderLease / 4)
			lease.RenewedAt = timestamppb.Now()
			if next, err := leases.Update(ctx, contract.LeaseCoordinator, lease, rev); err == nil {
				rev = next
			}
		}
	}()
	// margin: asked every leaderCheckEvery (5s) while the record is still.
	natstest.Eventually(t, 3*leaderCheckEvery, "the line that one leads again", func() bool {
		return strings.Contains(out.String(), "a coordinator leads again")
	})
	cancel()
	if code := <-done; code != exitInterrupted {
		t.Errorf("exit %d after the interrupt, want %d:\n%s", code, exitInterrupted, out.String())
	}
	if n := strings.Count(out.String(), "no coordinator"); n != 1 {
		t.Errorf("the no-leader line said %d times, want once:\n%s", n, out.String())
	}
}

// A failure's message and output are cut to fit a terminal, never in a
// pipe: `rollout status` and `rollout history` piped print the whole text,
// whose decisive part is often last (issue 42: "| output: ping 10.0.0.…").
func TestRolloutStatusAndHistory_Piped_PrintTheWholeFailure(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	r := rolledBack()
	output := "PING 10.0.0.1 (10.0.0.1) 56(84) bytes of data. --- 10.0.0.1 ping statistics --- 3 packets transmitted, 0 received, 100% packet loss, time 2003ms: the gateway of VLAN 100 is gone"
	r.Failures[0].Output = output
	r.Reason = strings.Repeat("node-03 failed its check ping and the rollout stopped; ", 3) + "reverted 5 nodes: exit status 7"
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, env)
	code, out, stderr := sluice(t, env.URL, "rollout", "status", r.GetId())
	if code != ExitRolledBack {
		t.Fatalf("rollout status: exit %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(out, "| output: "+output+"\n") {
		t.Errorf("rollout status in a pipe cut the check's output:\n%s", out)
	}
	code, out, stderr = sluice(t, env.URL, "rollout", "history")
	if code != 0 {
		t.Fatalf("rollout history: exit %d\n%s%s", code, out, stderr)
	}
	if !strings.Contains(out, "exit status 7") {
		t.Errorf("rollout history in a pipe cut the reason:\n%s", out)
	}
	// On a terminal they are cut to fit.
	lines := rolloutBlock(r, nil, now, widthsFor(true))
	if text := strings.Join(lines, "\n"); strings.Contains(text, "the gateway of VLAN 100 is gone") || !strings.Contains(text, "…") {
		t.Errorf("on a terminal the output is not cut:\n%s", text)
	}
}

// A rollout of the revision already in force (an undo to it, a retry) is
// not "revision X (from X)".
func TestRolloutLines_SameRevisionAsBefore_NoFrom(t *testing.T) {
	r := rolledBack()
	r.PreviousRevision = r.Revision
	text := strings.Join(rolloutLines(r, nil, now), "\n")
	if !strings.Contains(text, "revision  bbbbbbbbbbbb\n") || strings.Contains(text, "(from") {
		t.Errorf("the revision line names itself as where it came from:\n%s", text)
	}
}

// get nodes -l that matches nothing says so (on stderr: stdout stays the
// listing), instead of a bare header.
func TestGetNodes_SelectorMatchingNothing_SaysSo(t *testing.T) {
	s := startSystem(t, 2)
	natstest.Eventually(t, 30*time.Second, "two nodes present", func() bool {
		_, out, _ := sluice(t, s.URL(), "get", "nodes")
		return strings.Count(out, "\nnode-") == 2
	})
	code, out, stderr := sluice(t, s.URL(), "get", "nodes", "-l", "zone=zone-z")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(out, "node-") || !strings.Contains(stderr, `no node matches -l zone=zone-z: none of the 2 registered has every one of those labels`) {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, stderr)
	}
	if _, _, stderr := sluice(t, s.URL(), "get", "nodes"); strings.Contains(stderr, "no node matches") {
		t.Errorf("without -l: %s", stderr)
	}
}

// On a terminal a failure is cut to fit; -o wide prints it whole there too
// (issue 42 item 8), for rollout status, its --watch and rollout history.
func TestRolloutStatusAndHistory_WideOnATerminal_PrintTheWholeFailure(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	r := rolledBack()
	output := "PING 10.0.0.1 (10.0.0.1) 56(84) bytes of data. --- 10.0.0.1 ping statistics --- 3 packets transmitted, 0 received, 100% packet loss, time 2003ms: the gateway of VLAN 100 is gone"
	r.Failures[0].Output = output
	r.Reason = strings.Repeat("node-03 failed its check ping and the rollout stopped; ", 3) + "reverted 5 nodes: exit status 7"
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, env)
	onTerminal := func(args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"--server", env.URL}, args...), Streams{Out: &out, Err: &errOut, TTY: true}, "test", time.Now)
		return code, out.String() + errOut.String()
	}
	for _, c := range []struct {
		args     []string
		code     int
		whole    string
		wholeCut bool // without -o wide the text is cut
	}{
		{[]string{"rollout", "status", r.GetId()}, ExitRolledBack, "| output: " + output + "\n", true},
		{[]string{"rollout", "status", r.GetId(), "--watch"}, ExitRolledBack, "| output: " + output + "\n", true},
		{[]string{"rollout", "history"}, 0, "exit status 7", true},
	} {
		code, out := onTerminal(c.args...)
		if code != c.code || strings.Contains(out, c.whole) != !c.wholeCut || !strings.Contains(out, "…") {
			t.Errorf("%v on a terminal: exit %d, want %d and the text cut:\n%s", c.args, code, c.code, out)
		}
		code, out = onTerminal(append(c.args, "-o", "wide")...)
		if code != c.code || !strings.Contains(out, c.whole) {
			t.Errorf("%v -o wide on a terminal: exit %d, want %d and %q whole:\n%s", c.args, code, c.code, c.whole, out)
		}
	}
	if code, out := onTerminal("rollout", "status", "--watch", "-o", "json"); code != ExitUsage {
		t.Errorf("--watch -o json: exit %d, want %d:\n%s", code, ExitUsage, out)
	}
}

// A watch whose server stops says that its connection moved, and where to,
// rather than going silent (issue 42 items 6 and 10: a compose server
// stopped under a piped watch).
func TestRolloutStatusWatch_ServerStops_SaysTheConnectionMoved(t *testing.T) {
	c := natstest.StartCluster(t, 3, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &sluicev1.Rollout{Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		StartedAt: timestamppb.Now(), Counts: &sluicev1.RolloutCounts{Total: 2, Pending: 2}}
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, c.Env)
	first := c.Nodes.ClientURLs()[0]
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		// Only the first server named: the client learns the others from it.
		done <- run(ctx, []string{"--server", first, "rollout", "status", r.GetId(), "--watch"}, Streams{Out: &out, Err: &out}, "test", time.Now)
	}()
	natstest.Eventually(t, 10*time.Second, "the watch drawing the rollout", func() bool { return strings.Contains(out.String(), "Progressing") })
	c.StopServer(t, 0)
	// margin: nats.go reconnects within its 2 s wait to a server it learned.
	natstest.Eventually(t, 15*time.Second, "the lines saying the connection moved", func() bool {
		s := out.String()
		return strings.Contains(s, "lost the connection to NATS") && regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d reconnected to NATS at nats://127\.0\.0\.1:\d+$`).MatchString(s)
	})
	cancel()
	<-done
	if strings.Contains(out.String(), "reconnected to NATS at "+first+"\n") {
		t.Errorf("reconnected to the stopped server:\n%s", out.String())
	}
}
