package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestPlan(t *testing.T) {
	const (
		provisioning = sluicev1.NodePhase_NODE_PHASE_PROVISIONING
		provisioned  = sluicev1.NodePhase_NODE_PHASE_PROVISIONED
		invalid      = sluicev1.NodePhase_NODE_PHASE_INVALID
	)
	d := &sluicev1.DesiredConfig{Node: "n1", Revision: "r2", Rollout: "ro2", Fingerprint: "fp2", Operation: "op2"}
	status := func(phase sluicev1.NodePhase, fp, rev, rollout string) *sluicev1.NodeStatus {
		return &sluicev1.NodeStatus{Node: "n1", Phase: phase, Fingerprint: fp, Revision: rev, Rollout: rollout}
	}
	opStatus := func(phase sluicev1.NodePhase, fp, op string) *sluicev1.NodeStatus {
		st := status(phase, fp, "r2", "ro2")
		st.Operation = op
		return st
	}
	tests := []struct {
		name    string
		applied string
		status  *sluicev1.NodeStatus
		want    action
	}{
		{name: "first config on a new node", applied: "", status: nil, want: actProvision},
		{name: "new fingerprint", applied: "fp1", status: status(provisioned, "fp1", "r1", "ro1"), want: actProvision},
		{name: "in force and reported", applied: "fp2", status: status(provisioned, "fp2", "r2", "ro2"), want: actSkip},
		{name: "in force, reported under another rollout", applied: "fp2", status: status(provisioned, "fp2", "r1", "ro1"), want: actReport},
		{name: "in force but status lost (reaped or never written)", applied: "fp2", status: nil, want: actProvision},
		{name: "crashed mid-apply", applied: "fp1", status: status(provisioning, "fp2", "r2", "ro2"), want: actProvision},
		{name: "applied but Provisioned never written", applied: "fp2", status: status(provisioning, "fp2", "r2", "ro2"), want: actProvision},
		{name: "its failure already reported", applied: "fp1", status: status(invalid, "fp2", "r2", "ro2"), want: actSkip},
		{name: "revert to the config in force after a failure", applied: "fp2", status: status(invalid, "fp3", "r3", "ro3"), want: actProvision},
		{name: "its deadline failure reported, last-good being this config", applied: "fp2", status: opStatus(invalid, "fp2", "op2"), want: actSkip},
		{name: "a new operation for a config reported invalid (retry)", applied: "fp2", status: opStatus(invalid, "fp2", "op1"), want: actProvision},
		{name: "status says Provisioned but last-good is gone", applied: "", status: status(provisioned, "fp2", "r2", "ro2"), want: actProvision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := plan(tt.applied, tt.status, d); got != tt.want {
				t.Fatalf("plan = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestMailbox_KeepsNewest(t *testing.T) {
	cfg := func(fp string) *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{Fingerprint: fp} }
	tests := []struct {
		name     string
		given    []desired
		want     string // fingerprint taken, "" = nothing
		accepted []bool
	}{
		{name: "nothing offered", want: ""},
		{name: "newer replaces pending", given: []desired{{cfg: cfg("a"), rev: 1}, {cfg: cfg("b"), rev: 2}, {cfg: cfg("c"), rev: 3}}, want: "c", accepted: []bool{true, true, true}},
		{name: "older revision after newer is dropped", given: []desired{{cfg: cfg("b"), rev: 5}, {cfg: cfg("a"), rev: 4}}, want: "b", accepted: []bool{true, false}},
		{name: "same revision again is accepted", given: []desired{{cfg: cfg("a"), rev: 5}, {cfg: cfg("a"), rev: 5}}, want: "a", accepted: []bool{true, true}},
		{name: "unknown revision is accepted", given: []desired{{cfg: cfg("a"), rev: 5}, {cfg: cfg("b"), rev: 0}}, want: "b", accepted: []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mailbox{wake: make(chan struct{}, 1)}
			for i, d := range tt.given {
				if got := b.offer(d); got != tt.accepted[i] {
					t.Fatalf("offer #%d accepted = %v, want %v", i, got, tt.accepted[i])
				}
			}
			d, ok := b.take()
			if got := d.cfg.GetFingerprint(); ok != (tt.want != "") || got != tt.want {
				t.Fatalf("take = %q, %v; want %q", got, ok, tt.want)
			}
			if _, ok := b.take(); ok {
				t.Fatal("second take returned a config; want the mailbox empty")
			}
		})
	}
}

// TestAgent_WritesWhileApplying_OnlyNewestAppliedNext checks the coalescing
// end to end: three configs arrive while the first apply is blocked; only the
// newest of them is applied after it.
func TestAgent_WritesWhileApplying_OnlyNewestAppliedNext(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	// Margin: every wait below returns as soon as its condition holds; a
	// minute is far beyond what a loaded machine needs for it all.
	const wait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	release := make(chan struct{})
	applied := make(chan string, 10)
	a, err := New(Config{Conn: env.Conn, Settings: env.Settings, Node: "n1", Applier: ApplierFunc(
		func(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
			applied <- nameOf(cfg)
			if nameOf(cfg) == "c1" {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	var rev uint64
	write := func(name string) {
		d := named(name)
		d.Revision = "r-" + name
		var err error
		rev, err = configs.Update(ctx, contract.DesiredKey("n1"), d, rev)
		if err != nil {
			t.Fatal(err)
		}
	}
	write("c1")
	if got := <-applied; got != "c1" {
		t.Fatalf("first apply = %s, want c1", got)
	}
	write("c2")
	write("c3")
	write("c4")
	natstest.Eventually(t, wait, "c4 to reach the mailbox", func() bool {
		a.box.mu.Lock()
		defer a.box.mu.Unlock()
		return a.box.seen == rev
	})
	close(release)
	if got := <-applied; got != "c4" {
		t.Fatalf("apply after the blocked one = %s, want c4", got)
	}
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, wait, "Provisioned c4", func() bool {
		e, err := statuses.Get(ctx, "n1")
		return err == nil && e.Value.GetFingerprint() == named("c4").Fingerprint && e.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED
	})
	select {
	case name := <-applied:
		t.Fatalf("%s applied after c4", name)
	default:
	}
}

// The worker claims an operation (marks itself busy with it) before it
// looks at the pause, so a pause that arrives as the worker takes an
// operation either holds it or waits for it — never both acknowledged and
// started. Until 2026-11-28 the worker looked first and marked after: a
// pause seen in between was acknowledged (the worker was still idle) and
// the operation then started under it (chaos seed 66: an apply under an
// acknowledged pause). The two orders in which a pause can meet a take:
func TestWorker_NeverStartsUnderAPauseItAcknowledged(t *testing.T) {
	newAgent := func(t *testing.T) *Agent {
		a, err := New(Config{Conn: &nats.Conn{}, Node: "n1", Applier: NewFileApplier(t.TempDir() + "/c.json")})
		if err != nil {
			t.Fatal(err)
		}
		a.em = events.NewEmitter(nil, zerolog.Nop(), Component, time.Now)
		a.box.offer(desired{cfg: named("c1"), rev: 1})
		return a
	}
	pause := &sluicev1.PauseRequest{Paused: true, Generation: 1}
	acked := func(a *Agent) bool {
		ack := a.currentAck()
		return ack.GetPaused() && contract.PauseReached(ack, 1)
	}
	t.Run("seen after the worker looked, before it claimed: held", func(t *testing.T) {
		a := newAgent(t)
		if a.held() { // the worker's look, as the old worker made it first
			t.Fatal("held before any pause")
		}
		a.pauseSeen(pause, "test") // the pause lands now: the worker is idle
		if !acked(a) {
			t.Fatal("an idle agent did not acknowledge the pause")
		}
		if _, started := a.next(); started {
			t.Fatalf("the worker started c1 under a pause it acknowledged (%v)", a.currentAck())
		}
		if d, ok := a.box.take(); !ok || nameOf(d.cfg) != "c1" {
			t.Fatalf("the held operation left the mailbox (%v, %v)", d.cfg, ok)
		}
		if !acked(a) {
			t.Fatalf("the acknowledgement was withdrawn (%v)", a.currentAck())
		}
	})
	t.Run("seen after the worker claimed: waits for the operation", func(t *testing.T) {
		a := newAgent(t)
		d, started := a.next()
		if !started {
			t.Fatal("nothing started without a pause")
		}
		a.pauseSeen(pause, "test")
		if acked(a) {
			t.Fatalf("pause acknowledged while %s runs (%v)", nameOf(d.cfg), a.currentAck())
		}
		a.setBusy("", nil) // the operation ended
		if !acked(a) {
			t.Fatalf("pause not acknowledged once the worker is idle (%v)", a.currentAck())
		}
	})
}
