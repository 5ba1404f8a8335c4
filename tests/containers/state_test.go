//go:build containers

package containers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Everything here reads the system from the outside: the buckets through
// the host's client, and files through the Docker API. Nothing looks at a
// service's memory.

func (c *cluster) rollouts() *store.Store[*sluicev1.Rollout] {
	return store.New(c.b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
}

func (c *cluster) statuses() *store.Store[*sluicev1.NodeStatus] {
	return store.New(c.b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
}

func (c *cluster) nodeConfigs() *store.Store[*sluicev1.DesiredConfig] {
	return store.New(c.b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
}

func (c *cluster) leases() *store.Store[*sluicev1.LeaderLease] {
	return store.New(c.b.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
}

// intentsWith is the examples plus a routing table on every node, so that
// each new tableID changes every node's config and rolls out to all of them.
func intentsWith(t *testing.T, tableID uint32) []*sluicev1.Intent {
	t.Helper()
	in, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	return append(in, &sluicev1.Intent{Name: "fleet-wide", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: tableID}}})
}

// applied is one acknowledged apply: what was stored, and its rollout.
type applied struct {
	intents  []*sluicev1.Intent
	revision string
	rollout  string
}

// apply stores the intents through the configurator's API, as `sluice
// apply` does, and returns the rollout it starts.
func (c *cluster) apply(t *testing.T, intents []*sluicev1.Intent, st *sluicev1.Strategy) applied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := apiclient.WaitReady(ctx, c.nc); err != nil {
		t.Fatal(err)
	}
	resp, err := apiclient.Apply(ctx, c.nc, &sluicev1.ApplyRequest{Intents: intents, Strategy: st, Source: "container-tests"})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if !resp.GetChanged() {
		t.Fatalf("apply: nothing changed: %v", resp)
	}
	return applied{intents: intents, revision: resp.GetRevision(), rollout: contract.RolloutID(resp.GetGeneration(), resp.GetRevision())}
}

// rollout reads rollout id's record.
func (c *cluster) rollout(ctx context.Context, id string) (*sluicev1.Rollout, error) {
	e, err := c.rollouts().Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.Value, nil
}

// waitRollout waits until rollout id's record satisfies cond and returns it.
func (c *cluster) waitRollout(t *testing.T, id string, timeout time.Duration, what string, cond func(*sluicev1.Rollout) bool) *sluicev1.Rollout {
	t.Helper()
	var r *sluicev1.Rollout
	eventually(t, timeout, fmt.Sprintf("rollout %s: %s", id, what), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := c.rollout(ctx, id)
		if err != nil {
			return false
		}
		r = got
		return cond(got)
	})
	return r
}

// waitEnd waits until rollout id has ended and returns its final record.
func (c *cluster) waitEnd(t *testing.T, id string, timeout time.Duration) *sluicev1.Rollout {
	t.Helper()
	return c.waitRollout(t, id, timeout, "to end", func(r *sluicev1.Rollout) bool { return contract.Terminal(r.GetPhase()) })
}

// running reports whether r is under way with at least n nodes provisioned.
func running(n uint32) func(*sluicev1.Rollout) bool {
	return func(r *sluicev1.Rollout) bool {
		return r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && r.GetCounts().GetProvisioned() >= n
	}
}

// lease reads the coordinator's leader lease; nil when no one holds it.
func (c *cluster) lease(ctx context.Context) (*sluicev1.LeaderLease, error) {
	e, err := c.leases().Get(ctx, contract.LeaseCoordinator)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.Value, nil
}

// leader waits for a coordinator to hold the lease and returns the lease.
func (c *cluster) leader(t *testing.T) *sluicev1.LeaderLease {
	t.Helper()
	var l *sluicev1.LeaderLease
	eventually(t, 3*leaderLease, "a coordinator to lead", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := c.lease(ctx)
		l = got
		return err == nil && got != nil
	})
	return l
}

// events returns the events stream's events from since on, in stream order.
// A read that fails (a server that just came back, a consumer lost with it)
// is started over.
func (c *cluster) events(t *testing.T, since time.Time) []*sluicev1.Event {
	t.Helper()
	var out []*sluicev1.Event
	var err error
	eventually(t, time.Minute, "the events stream to be read", func() bool {
		out, err = c.readEvents(since)
		if err != nil {
			t.Logf("reading the events again: %v", err)
		}
		return err == nil
	})
	return out
}

func (c *cluster) readEvents(since time.Time) ([]*sluicev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	last := s.CachedInfo().State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return nil, fmt.Errorf("events consumer: %w", err)
	}
	var out []*sluicev1.Event
	for {
		batch, err := cons.Fetch(200, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		n := 0
		var seq uint64
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				seq = md.Sequence.Stream
			}
			ev := &sluicev1.Event{}
			if err := store.Unmarshal(m.Data(), ev); err != nil {
				return nil, fmt.Errorf("event %s does not decode: %w", m.Subject(), err)
			}
			out = append(out, ev)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read events: %w", err)
		}
		if n == 0 || seq >= last {
			return out, nil
		}
	}
}

// eventsOf are the events of types for rollout (or any rollout when "").
func eventsOf(evs []*sluicev1.Event, rollout string, types ...string) []*sluicev1.Event {
	var out []*sluicev1.Event
	for _, e := range evs {
		if slices.Contains(types, e.GetType()) && (rollout == "" || e.GetRollout() == rollout) {
			out = append(out, e)
		}
	}
	return out
}

// onDisk is the fingerprint of the config node's applier wrote last, read
// from the agent's container: what the node really runs.
func (c *cluster) onDisk(ctx context.Context, node string) (string, error) {
	b, err := c.readFile(ctx, node, agentStateDir+"/config.json")
	if err != nil {
		return "", err
	}
	var d sluicev1.DesiredConfig
	if err := store.Unmarshal(b, &d); err != nil {
		return "", fmt.Errorf("%s config.json: %w", node, err)
	}
	return d.GetFingerprint(), nil
}

// assertInvariants checks the brief's I1–I4 once rollout r has ended, as
// tests/e2e's assertInvariants does, but from outside: through the buckets
// and each live agent's config file.
func (c *cluster) assertInvariants(t *testing.T, r *sluicev1.Rollout) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// I2: it ended, within its progress deadline (counted in leader time).
	if !contract.Terminal(r.GetPhase()) {
		t.Errorf("I2: rollout %s has not ended: %s", r.GetId(), r.GetPhase())
	}
	deadline := contract.DefaultProgressDeadline
	if d := r.GetStrategy().GetProgressDeadline(); d != nil {
		deadline = d.AsDuration()
	}
	if r.GetLeaderTime().AsDuration() > deadline {
		t.Errorf("I2: rollout %s ran %s, past its progress deadline %s", r.GetId(), r.GetLeaderTime().AsDuration(), deadline)
	}
	present, err := store.New(c.b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Keys(ctx)
	if err != nil {
		t.Fatalf("present nodes: %v", err)
	}
	empty := render.Fingerprint(&sluicev1.NodeConfig{}) // a node without backup goes back to an empty config
	for _, node := range present {
		d, derr := c.nodeConfigs().Get(ctx, contract.DesiredKey(node))
		st, serr := c.statuses().Get(ctx, node)
		if derr != nil || serr != nil {
			t.Errorf("%s is present but has no desired config (%v) or status (%v)", node, derr, serr)
			continue
		}
		// I3: the agent's outcome for its desired config is on record.
		if st.Value.GetFingerprint() != d.Value.GetFingerprint() || st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
			t.Errorf("I3: %s desired %.12s but status is %s for %.12s", node, d.Value.GetFingerprint(), st.Value.GetPhase(), st.Value.GetFingerprint())
		}
		// I1: what is in force is the target or the backup, on record and on disk.
		inForce := st.Value.GetAppliedFingerprint()
		backup := empty
		if b, err := c.nodeConfigs().Get(ctx, contract.BackupKey(node)); err == nil {
			backup = b.Value.GetFingerprint()
		}
		if inForce != d.Value.GetFingerprint() && inForce != backup {
			t.Errorf("I1: %s runs %.12s, neither its desired %.12s nor its backup %.12s", node, inForce, d.Value.GetFingerprint(), backup)
		}
		if fp, err := c.onDisk(ctx, node); err != nil || fp != inForce {
			t.Errorf("I1: %s has %.12s on disk, its status says %.12s is in force (%v)", node, fp, inForce, err)
		}
	}
	// I4: every failed fingerprint is recorded with node, check and output.
	bad := store.New(c.b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	for _, f := range r.GetFailures() {
		if f.GetResult() != sluicev1.NodeResult_NODE_RESULT_INVALID || f.GetFailedCheck() == "revert" {
			continue
		}
		rec, err := bad.Get(ctx, f.GetFingerprint())
		if err != nil {
			t.Errorf("I4: failed fingerprint %.12s of %s is not recorded: %v", f.GetFingerprint(), f.GetNode(), err)
			continue
		}
		if rec.Value.GetNode() == "" || rec.Value.GetCheck() == "" || rec.Value.GetOutput() == "" {
			t.Errorf("I4: record of %.12s lacks node, check or output: %v", f.GetFingerprint(), rec.Value)
		}
	}
}

// assertSucceeded checks that r succeeded with nothing failed, timed out or
// reverted, and that each of nodes runs r's target: its desired config is
// of r's revision, provisioned, in force.
func (c *cluster) assertSucceeded(t *testing.T, r *sluicev1.Rollout, nodes ...string) {
	t.Helper()
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Errorf("rollout %s ended %s (%s); want SUCCEEDED", r.GetId(), r.GetPhase(), r.GetReason())
	}
	if n := r.GetCounts(); n.GetFailed() != 0 || n.GetTimedOut() != 0 || n.GetReverted() != 0 || n.GetReverting() != 0 {
		t.Errorf("rollout %s counts %v: want nothing failed, timed out or reverted", r.GetId(), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, node := range nodes {
		d, err := c.nodeConfigs().Get(ctx, contract.DesiredKey(node))
		if err != nil {
			t.Errorf("%s: no desired config: %v", node, err)
			continue
		}
		st, err := c.statuses().Get(ctx, node)
		if err != nil {
			t.Errorf("%s: no status: %v", node, err)
			continue
		}
		if d.Value.GetRevision() != r.GetRevision() || d.Value.GetRevert() ||
			st.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED ||
			st.Value.GetFingerprint() != d.Value.GetFingerprint() || st.Value.GetAppliedFingerprint() != d.Value.GetFingerprint() {
			t.Errorf("%s does not run rollout %s's target: desired revision %.12s revert=%v fingerprint %.12s; status %s for %.12s, in force %.12s",
				node, r.GetId(), d.Value.GetRevision(), d.Value.GetRevert(), d.Value.GetFingerprint(),
				st.Value.GetPhase(), st.Value.GetFingerprint(), st.Value.GetAppliedFingerprint())
		}
	}
}

// allNodes are the agents' node names.
func allNodes() []string {
	out := make([]string, len(agents))
	for i, a := range agents {
		out[i] = a.node
	}
	return out
}

// wall is how long r ran, from its start to its end.
func wall(r *sluicev1.Rollout) time.Duration {
	return r.GetFinishedAt().AsTime().Sub(r.GetStartedAt().AsTime())
}
