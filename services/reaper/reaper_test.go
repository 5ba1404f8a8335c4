package reaper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/reaper"
)

const grace = 5 * time.Minute

// wait bounds the waits on a reaper's output. Margin: each wait returns as
// soon as its condition holds, and 30s is far more than a pass and its
// events take on a loaded 2-core machine. Passes themselves run on an
// injected clock (clock) unless a test says otherwise.
const wait = 30 * time.Second

// clock is a fake clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fleet struct {
	env      *natstest.Env
	configs  *store.Store[*sluicev1.DesiredConfig]
	statuses *store.Store[*sluicev1.NodeStatus]
	nodes    *store.Store[*sluicev1.NodePresence]
}

func newFleet(t *testing.T, s contract.Settings) *fleet {
	env := natstest.Start(t, s)
	return &fleet{
		env:      env,
		configs:  store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		statuses: store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
		nodes:    store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }),
	}
}

// seed gives node a desired config, a backup and a status, as the
// coordinator and the node's agent would.
func (f *fleet) seed(t *testing.T, node string) {
	t.Helper()
	ctx := context.Background()
	for _, key := range []string{contract.DesiredKey(node), contract.BackupKey(node)} {
		if _, err := f.configs.Create(ctx, key, formed(&sluicev1.DesiredConfig{Node: node, Fingerprint: "fp"})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.statuses.Create(ctx, node, &sluicev1.NodeStatus{Node: node, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}); err != nil {
		t.Fatal(err)
	}
}

// arrive writes node's presence and returns its revision.
func (f *fleet) arrive(t *testing.T, node string) uint64 {
	t.Helper()
	rev, err := f.nodes.Create(context.Background(), node, &sluicev1.NodePresence{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// keys reports which of node's keys exist.
func (f *fleet) keys(t *testing.T, node string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	check := func(what string, err error) {
		switch {
		case err == nil:
			out = append(out, what)
		case !errors.Is(err, store.ErrNotFound):
			t.Fatal(err)
		}
	}
	_, err := f.configs.Get(ctx, contract.DesiredKey(node))
	check("desired", err)
	_, err = f.configs.Get(ctx, contract.BackupKey(node))
	check("backup", err)
	_, err = f.statuses.Get(ctx, node)
	check("status", err)
	return out
}

// newReaper returns a reaper on c's clock with the mass-deletion guard off
// (these fleets are two or three nodes); guard tests pass a share.
func (f *fleet) newReaper(t *testing.T, c *clock, holdShare ...float64) *reaper.Reaper {
	t.Helper()
	share := 1.0
	if len(holdShare) > 0 {
		share = holdShare[0]
	}
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, Now: c.Now, Grace: grace, HoldShare: share})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pass(t *testing.T, r *reaper.Reaper) {
	t.Helper()
	if err := r.Pass(context.Background()); err != nil {
		t.Fatalf("pass: %v", err)
	}
}

func wantKeys(t *testing.T, f *fleet, node string, want ...string) {
	t.Helper()
	if got := f.keys(t, node); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keys of %s = %v, want %v", node, got, want)
	}
}

func TestReaper_AbsentNode(t *testing.T) {
	tests := []struct {
		name       string
		absentFor  time.Duration
		wantReaped bool
	}{
		{name: "past grace is reaped", absentFor: grace + time.Second, wantReaped: true},
		{name: "exactly grace is kept", absentFor: grace, wantReaped: false},
		{name: "within grace is kept", absentFor: grace / 2, wantReaped: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			f.seed(t, "gone")
			f.seed(t, "live")
			f.arrive(t, "live")
			r := f.newReaper(t, c)

			pass(t, r) // first sight of the absence starts its timer
			c.Advance(tt.absentFor)
			pass(t, r)

			wantKeys(t, f, "live", "desired", "backup", "status")
			if !tt.wantReaped {
				wantKeys(t, f, "gone", "desired", "backup", "status")
				return
			}
			wantKeys(t, f, "gone")
			natstest.Eventually(t, wait, "NodeReaped event", func() bool {
				st, err := f.env.JS.Stream(context.Background(), contract.StreamEvents)
				if err != nil {
					t.Fatal(err)
				}
				m, err := st.GetLastMsgForSubject(context.Background(), contract.EventSubjectOf(contract.RoleReaper, contract.KindNode, "gone"))
				if err != nil {
					return false
				}
				ev := &sluicev1.Event{}
				if err := store.Unmarshal(m.Data, ev); err != nil {
					t.Fatal(err)
				}
				return ev.GetType() == reaper.EventNodeReaped && ev.GetComponent() == reaper.Component &&
					ev.GetReason() == "presence lease expired at least 5m0s ago; deleted desired, backup, status"
			})
		})
	}
}

func TestReaper_LiveNode_NeverReaped(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.seed(t, "n1")
	r := f.newReaper(t, c)
	pass(t, r) // n1 has no presence yet: its timer starts

	f.arrive(t, "n1")
	c.Advance(10 * grace)
	pass(t, r)
	wantKeys(t, f, "n1", "desired", "backup", "status")
}

func TestReaper_NodeReturnsBeforeGrace_IsNotReaped(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.seed(t, "n1")
	r := f.newReaper(t, c)
	pass(t, r) // absent: timer starts

	c.Advance(grace / 2)
	rev := f.arrive(t, "n1")
	pass(t, r) // back: timer cleared
	if err := f.nodes.Delete(context.Background(), "n1", rev); err != nil {
		t.Fatal(err)
	}
	c.Advance(grace/2 + time.Second) // past grace since the first absence, not since the second
	pass(t, r)
	wantKeys(t, f, "n1", "desired", "backup", "status")

	c.Advance(grace + time.Second) // past grace since the second absence was first seen
	pass(t, r)
	wantKeys(t, f, "n1")
}

func TestReaper_Run_ReapsNodeWhosePresenceExpired(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = time.Second
	f := newFleet(t, s)
	f.seed(t, "n1")
	f.arrive(t, "n1") // expires after the 1s lease: nobody renews it
	// Run on the wall clock (its own timer is under test). Margin: lease,
	// grace and interval add up to under 2s, and the wait below returns as
	// soon as the keys are gone.
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: s, Grace: 300 * time.Millisecond, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	natstest.Eventually(t, wait, "n1's keys to be reaped", func() bool { return len(f.keys(t, "n1")) == 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil on cancel", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
}

// A node's reap comes when its absence passes Grace, not at the next
// interval: here the interval (an hour) never ticks.
func TestReaper_Run_ReapsWhenTheAbsencePassesGrace(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = time.Second
	f := newFleet(t, s)
	f.seed(t, "n1")
	f.arrive(t, "n1") // expires after the 1s lease: nobody renews it
	// Grace is longer than the pass a lost presence brings (passDelay, 1s):
	// that pass finds n1 absent but not yet due.
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: s, Grace: 2 * time.Second, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	natstest.Eventually(t, wait, "n1's keys to be reaped", func() bool { return len(f.keys(t, "n1")) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v, want nil on cancel", err)
	}
}

func TestNew_RequiresConn(t *testing.T) {
	if _, err := reaper.New(reaper.Config{}); err == nil {
		t.Fatal("New without Conn succeeded")
	}
}

// formed gives d, a test's desired config, a config its fingerprint is
// the fingerprint of, as the store requires (pkg/contract/wellformed): the
// config is named after the test's fingerprint tag.
func formed(d *sluicev1.DesiredConfig) *sluicev1.DesiredConfig {
	d.Config = &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: d.GetFingerprint()}}}
	d.Fingerprint = render.Fingerprint(d.Config)
	return d
}
