package agent_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// waitFor bounds every wait on the agent. Margin: each wait returns as soon
// as its condition holds, and 30s is far more than the agent needs to
// register, apply or report on a loaded 2-core machine.
const waitFor = 30 * time.Second

// fleet is a test server and typed views of the buckets the agent touches.
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

// start runs an agent for node until the returned stop is called (or the
// test ends), and checks Run returned nil.
func (f *fleet) start(t *testing.T, cfg agent.Config) (stop func()) {
	t.Helper()
	_, stop = f.run(t, cfg)
	return stop
}

// run is start that also returns the agent, for a test to call Resync.
func (f *fleet) run(t *testing.T, cfg agent.Config) (*agent.Agent, func()) {
	t.Helper()
	cfg.Conn = f.env.Conn
	if cfg.Settings == (contract.Settings{}) {
		cfg.Settings = f.env.Settings
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("new agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil on cancel", err)
				}
			case <-time.After(waitFor):
				t.Errorf("Run did not return within %s of cancel", waitFor)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// writeDesired writes node's desired config as the coordinator does.
func (f *fleet) writeDesired(t *testing.T, d *sluicev1.DesiredConfig) {
	t.Helper()
	ctx := context.Background()
	key := contract.DesiredKey(d.Node)
	cur, err := f.configs.Get(ctx, key) // an unreadable value is overwritten at its revision
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUndecodable) {
		t.Fatal(err)
	}
	if _, err := f.configs.Update(ctx, key, d, cur.Revision); err != nil {
		t.Fatalf("write desired: %v", err)
	}
}

// waitStatus waits until node's status satisfies cond and returns it.
func (f *fleet) waitStatus(t *testing.T, node, what string, cond func(*sluicev1.NodeStatus) bool) *sluicev1.NodeStatus {
	t.Helper()
	var got *sluicev1.NodeStatus
	natstest.Eventually(t, waitFor, what, func() bool {
		e, err := f.statuses.Get(context.Background(), node)
		got = e.Value
		return err == nil && cond(got)
	})
	return got
}

func provisioned(fp string) func(*sluicev1.NodeStatus) bool {
	return func(s *sluicev1.NodeStatus) bool {
		return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && s.GetFingerprint() == fp
	}
}

// desiredConfig is node's desired config called name (its revision is
// "rev-<name>", its rollout "rollout-<name>"): one layer-2 network
// "tenant-<name>" on vlan, fingerprinted as the coordinator does. Configs
// with different names or vlans have different fingerprints.
func desiredConfig(node, name string, vlan uint32) *sluicev1.DesiredConfig {
	nc := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{
		Name: "tenant-" + name,
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 10000 + vlan}},
	}}}
	return &sluicev1.DesiredConfig{
		Node: node, Revision: "rev-" + name, Rollout: "rollout-" + name, Fingerprint: render.Fingerprint(nc), Config: nc,
	}
}

// recorder is an Applier that records every config it is asked to apply.
type recorder struct {
	mu     sync.Mutex
	calls  []*sluicev1.DesiredConfig
	err    error
	failFP string        // with err: fail only this fingerprint ("" = all)
	next   agent.Applier // applies what does not fail, if set
}

func (r *recorder) Apply(_ context.Context, cfg *sluicev1.DesiredConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, cfg)
	if r.err != nil && (r.failFP == "" || cfg.GetFingerprint() == r.failFP) {
		return r.err
	}
	if r.next != nil {
		return r.next.Apply(context.Background(), cfg)
	}
	return nil
}

func (r *recorder) fingerprints() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.calls))
	for i, c := range r.calls {
		out[i] = c.GetFingerprint()
	}
	return out
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// logBuffer collects an agent's log lines so a test can wait for one.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func (b *logBuffer) logger() zerolog.Logger { return zerolog.New(b).Level(zerolog.DebugLevel) }

func lastEvent(t *testing.T, f *fleet, node string) *sluicev1.Event {
	t.Helper()
	ctx := context.Background()
	st, err := f.env.JS.Stream(ctx, contract.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, contract.EventSubject("node", node))
	if err != nil {
		return nil
	}
	ev := &sluicev1.Event{}
	if err := store.Unmarshal(m.Data, ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestAgent_RegistersPresenceWithLabels(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{
		Node: "n1", Labels: map[string]string{"zone": "a", "rack": "r7"}, Version: "v1.2.3",
		StateDir: t.TempDir(), Applier: &recorder{},
	})

	var got *sluicev1.NodePresence
	natstest.Eventually(t, waitFor, "presence of n1", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		got = e.Value
		return err == nil
	})
	if got.GetNode() != "n1" || got.GetAgentVersion() != "v1.2.3" || got.GetLabels()["zone"] != "a" || got.GetLabels()["rack"] != "r7" {
		t.Fatalf("presence = %v, want node n1, version v1.2.3, labels zone=a rack=r7", got)
	}
	if got.GetStartedAt() == nil || got.GetHeartbeatAt() == nil {
		t.Fatalf("presence = %v, want started_at and heartbeat_at", got)
	}
	// The config schema it reads (issue 38 item 2): the coordinator writes
	// it nothing it cannot read.
	if !slices.Equal(got.GetConfigFeatures(), contract.ConfigFeatures) {
		t.Fatalf("presence states config features %v, want %v", got.GetConfigFeatures(), contract.ConfigFeatures)
	}
	natstest.Eventually(t, waitFor, "NodeRegistered event", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeRegistered && strings.Contains(ev.GetReason(), "rack=r7,zone=a")
	})
}

func TestAgent_AppliesDesiredConfig(t *testing.T) {
	tests := []struct {
		name        string
		beforeStart bool // written before the agent runs: found by the Get at start
	}{
		{name: "written after the agent started", beforeStart: false},
		{name: "written before the agent started", beforeStart: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			dir := t.TempDir()
			path := filepath.Join(dir, "config.json")
			want := desiredConfig("n1", "one", 100)
			if tt.beforeStart {
				f.writeDesired(t, want)
			}
			f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(path)})
			if !tt.beforeStart {
				natstest.Eventually(t, waitFor, "presence", func() bool {
					_, err := f.nodes.Get(context.Background(), "n1")
					return err == nil
				})
				f.writeDesired(t, want)
			}

			st := f.waitStatus(t, "n1", "status Provisioned one", provisioned(want.Fingerprint))
			if st.GetAppliedFingerprint() != want.Fingerprint || st.GetMessage() != "applied" || st.GetRevision() != want.Revision ||
				st.GetRollout() != want.Rollout || st.GetApplyStartedAt() == nil || st.GetLastUpdate() == nil {
				t.Fatalf("status = %v", st)
			}
			for _, file := range []string{path, filepath.Join(dir, agent.LastGoodFile)} {
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				got := &sluicev1.DesiredConfig{}
				if err := store.Unmarshal(b, got); err != nil || !proto.Equal(got, want) {
					t.Fatalf("%s holds %s (%v), want %v", file, b, err, want)
				}
			}
			natstest.Eventually(t, waitFor, "NodeProvisioned event", func() bool {
				ev := lastEvent(t, f, "n1")
				return ev.GetType() == agent.EventNodeProvisioned && ev.GetFingerprint() == want.Fingerprint && ev.GetRollout() == want.Rollout
			})
		})
	}
}

func TestAgent_FailingApplier_ReportsInvalidAndDoesNotRetryIt(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	logs := &logBuffer{}
	bad := desiredConfig("n1", "bad", 100)
	rec := &recorder{err: errors.New("vlan 100: device busy"), failFP: bad.Fingerprint}
	f.writeDesired(t, bad)
	a, _ := f.run(t, agent.Config{Log: logs.logger(), Node: "n1", StateDir: t.TempDir(), Applier: rec})

	st := f.waitStatus(t, "n1", "status Invalid", func(s *sluicev1.NodeStatus) bool {
		return s.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID
	})
	// With no last-good, the node goes back to an empty config.
	empty := render.Fingerprint(&sluicev1.NodeConfig{})
	if st.GetFailedCheck() != "apply" || st.GetCheckOutput() != "vlan 100: device busy" || st.GetFingerprint() != bad.Fingerprint ||
		st.GetAppliedFingerprint() != empty || !strings.Contains(st.GetMessage(), "device busy") {
		t.Fatalf("status = %v, want Invalid with failed_check apply, the error text and the empty config in force", st)
	}
	natstest.Eventually(t, waitFor, "NodeInvalid event", func() bool {
		ev := lastEvent(t, f, "n1")
		return ev.GetType() == agent.EventNodeInvalid && strings.Contains(ev.GetReason(), "device busy")
	})

	// A resync finds the same desired config: its failure is on record, so
	// it is not applied again (the coordinator decides what comes next).
	handled := logs.count("already handled")
	a.Resync()
	natstest.Eventually(t, waitFor, "resync handled", func() bool { return logs.count("already handled") > handled })
	if got := rec.fingerprints(); !slices.Equal(got, []string{bad.Fingerprint, empty}) {
		t.Fatalf("applied %v, want the bad config once then the empty one", got)
	}
}

func TestAgent_RestartWithSameDesired_DoesNotReapply(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	one := desiredConfig("n1", "one", 100)
	f.writeDesired(t, one)

	first := &recorder{}
	stop := f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: first})
	f.waitStatus(t, "n1", "first run Provisioned", provisioned(one.Fingerprint))
	stop()
	before, err := f.statuses.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}

	second, logs := &recorder{}, &logBuffer{}
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: second, Log: logs.logger()})
	natstest.Eventually(t, waitFor, "restarted agent to handle its desired config", func() bool {
		return logs.count("already handled") > 0
	})
	if n := second.count(); n != 0 {
		t.Fatalf("restarted agent applied %d times, want 0", n)
	}
	after, err := f.statuses.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision || after.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("status after restart = %v at revision %d, want unchanged Provisioned at %d", after.Value, after.Revision, before.Revision)
	}
}

func TestAgent_PresenceExpiresAfterStop(t *testing.T) {
	s := contract.DefaultSettings()
	// Margin: a beat every second renews a 3s lease, so only a beat more
	// than 2s late (not a loaded machine's scheduling) lets it lapse.
	s.NodeLease = 3 * time.Second
	f := newFleet(t, s)
	stop := f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	natstest.Eventually(t, waitFor, "presence", func() bool {
		_, err := f.nodes.Get(context.Background(), "n1")
		return err == nil
	})
	// While running, heartbeats keep the lease alive past two leases.
	renewed := time.Now().Add(2 * s.NodeLease)
	natstest.Eventually(t, waitFor, "presence to outlive its lease while running", func() bool {
		_, err := f.nodes.Get(context.Background(), "n1")
		if err != nil {
			t.Fatalf("presence lost while the agent runs: %v", err)
		}
		return time.Now().After(renewed)
	})

	stop()
	natstest.Eventually(t, waitFor, "presence to expire", func() bool {
		_, err := f.nodes.Get(context.Background(), "n1")
		return errors.Is(err, store.ErrNotFound)
	})
}

func TestAgent_CreatesNoJetStreamConsumers(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	f.start(t, agent.Config{Node: "n2", StateDir: t.TempDir(), Applier: &recorder{}})
	one, two := desiredConfig("n1", "one", 100), desiredConfig("n2", "two", 200)
	f.writeDesired(t, one)
	f.writeDesired(t, two)
	f.waitStatus(t, "n1", "n1 Provisioned", provisioned(one.Fingerprint))
	f.waitStatus(t, "n2", "n2 Provisioned", provisioned(two.Fingerprint))

	ctx := context.Background()
	names := f.env.JS.StreamNames(ctx)
	for name := range names.Name() {
		st, err := f.env.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 0 {
			t.Errorf("stream %s has %d consumers, want 0", name, info.State.Consumers)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestAgent_DeletedDesired_KeepsWhatIsInForce(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	rec, logs := &recorder{}, &logBuffer{}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, Log: logs.logger()})
	one := desiredConfig("n1", "one", 100)
	f.writeDesired(t, one)
	f.waitStatus(t, "n1", "Provisioned", provisioned(one.Fingerprint))

	e, err := f.configs.Get(context.Background(), contract.DesiredKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.configs.Delete(context.Background(), contract.DesiredKey("n1"), e.Revision); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitFor, "delete to be seen", func() bool { return logs.count("desired config deleted") > 0 })
	if n := rec.count(); n != 1 {
		t.Fatalf("Apply called %d times, want 1", n)
	}
	f.waitStatus(t, "n1", "status unchanged", provisioned(one.Fingerprint))
}

// The reaper deletes every key of a node whose presence lapsed (a partition
// longer than the grace) while its agent runs on. When the coordinator then
// writes the config already in force again, the agent has nothing to apply,
// but it must report again: its status is gone.
func TestAgent_ReapedWhileRunning_WritesItsStatusAgain(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	rec := &recorder{}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, Log: zerolog.Nop()})
	one := desiredConfig("n1", "one", 100)
	f.writeDesired(t, one)
	f.waitStatus(t, "n1", "Provisioned", provisioned(one.Fingerprint))

	ctx := context.Background()
	d, err := f.configs.Get(ctx, contract.DesiredKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.statuses.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.configs.Delete(ctx, contract.DesiredKey("n1"), d.Revision); err != nil {
		t.Fatal(err)
	}
	if err := f.statuses.Delete(ctx, "n1", st.Revision); err != nil {
		t.Fatal(err)
	}
	f.writeDesired(t, desiredConfig("n1", "one", 100)) // the coordinator configures the returning node

	f.waitStatus(t, "n1", "the status written again", provisioned(one.Fingerprint))
	if n := rec.count(); n != 1 {
		t.Errorf("Apply called %d times, want 1: the config was in force", n)
	}
}

func TestNew_RejectsBadConfig(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	tests := []struct {
		name    string
		given   agent.Config
		wantErr string
	}{
		{name: "no connection", given: agent.Config{Node: "n1", Applier: &recorder{}}, wantErr: "Conn is required"},
		{name: "invalid node name", given: agent.Config{Conn: f.env.Conn, Node: "N_1", Applier: &recorder{}}, wantErr: "node name"},
		{name: "no applier", given: agent.Config{Conn: f.env.Conn, Node: "n1"}, wantErr: "Applier is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := agent.New(tt.given)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: got %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// An agent beats for the lease in force, the nodes bucket's TTL, not for
// the lease its own settings name: agents have no --node-lease, and one
// given none (3 minutes, a beat a minute) on a fleet whose coordinator runs
// a 3 s lease would let its presence lapse between beats.
func TestAgent_BeatsForTheBucketsLease(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 3 * time.Second
	f := newFleet(t, s)
	mine := f.env.Settings
	mine.NodeLease = contract.DefaultNodeLease
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}, Settings: mine})

	ctx0 := context.Background()
	var first uint64
	natstest.Eventually(t, waitFor, "presence", func() bool {
		e, err := f.nodes.Get(ctx0, "n1")
		if err == nil {
			first = e.Revision
		}
		return err == nil
	})
	// A beat a second at a 3 s lease: within two leases the presence has
	// been rewritten and has never lapsed. At the agent's own 3 minutes it
	// would be written once and gone after 3 s.
	until := time.Now().Add(2 * s.NodeLease)
	for time.Now().Before(until) {
		e, err := f.nodes.Get(ctx0, "n1")
		if err != nil {
			t.Fatalf("presence lapsed while the agent runs (does it beat for its own 3m instead of the bucket's 3s?): %v", err)
		}
		if e.Revision > first+1 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("presence not rewritten within %s of registering: the agent does not beat for the bucket's lease", 2*s.NodeLease)
}
