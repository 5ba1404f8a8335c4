package dashboard_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fleetUpdate is the compact fleet of a stream update, and the rollout in force.
type fleetUpdate struct {
	Fleet *struct {
		Names     []string
		Present   string
		Revision  []int
		Revisions []string
		Domain    []int
		Domains   [][]string
	}
	RemovedNodes []string
	Applied      *string
}

// nodeIn is node's revision and domain in u's fleet; ok false when u does
// not carry it.
func (u fleetUpdate) nodeIn(node string) (rev string, domain []string, present, ok bool) {
	if u.Fleet == nil {
		return "", nil, false, false
	}
	for i, n := range u.Fleet.Names {
		if n == node {
			return u.Fleet.Revisions[u.Fleet.Revision[i]], u.Fleet.Domains[u.Fleet.Domain[i]], u.Fleet.Present[i] == '1', true
		}
	}
	return "", nil, false, false
}

func nextFleet(t *testing.T, ch <-chan sseMsg, what string, ok func(fleetUpdate) bool) fleetUpdate {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, open := <-ch:
			if !open {
				t.Fatalf("%s: the stream ended", what)
			}
			var u fleetUpdate
			if err := json.Unmarshal(m.data, &u); err != nil {
				t.Fatal(err)
			}
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("%s: no such update within 10 s", what)
		}
	}
}

// TestFleet_RevisionInForce_AsSluiceGetNodes (issue 42 item 5): a node the
// last rollout did not change keeps its status's revision (the one that
// last changed it), and runs the config the revision in force gives it:
// the dashboard's fleet, in the API and in the stream, names the revision
// in force, as `sluice get nodes` does; when last-applied moves on to a
// revision that would change the node, it names the status's again.
func TestFleet_RevisionInForce_AsSluiceGetNodes(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	ctx := context.Background()
	l2 := &sluicev1.Intent{Name: "mgmt", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 100, Vni: 10100}}}
	rev2 := &sluicev1.Revision{Id: "rev-2", Intents: []*sluicev1.Intent{l2}, CreatedAt: timestamppb.Now()}
	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	if _, err := revs.Create(ctx, rev2.GetId(), rev2); err != nil {
		t.Fatal(err)
	}
	// node-01 (zone-a, rack-1) last changed by rev-1, running what rev-2 gives it.
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	labels := map[string]string{"zone": "zone-a", "rack": "rack-1"}
	fp := render.Fingerprint(render.NodeConfig(rev2, labels))
	if _, err := statuses.Mutate(ctx, "node-01", func(st *sluicev1.NodeStatus) (*sluicev1.NodeStatus, error) {
		st.Fingerprint, st.AppliedFingerprint = fp, fp
		return st, nil
	}); err != nil {
		t.Fatal(err)
	}
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if _, err := refs.Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "2-rev2", Revision: "rev-2", Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	applied := ""
	nextFleet(t, ch, "node-01 on rev-2", func(u fleetUpdate) bool {
		if u.Applied != nil {
			applied = *u.Applied
		}
		rev, _, _, ok := u.nodeIn("node-01")
		return ok && rev == "rev-2"
	})
	if applied != "2-rev2" {
		t.Errorf("the rollout in force %q, want 2-rev2", applied)
	}
	want := sluiceJSON(t, env, "get", "nodes", "-o", "json")
	if !strings.Contains(string(want), `"revisionInForce": "rev-2"`) {
		t.Fatalf("sluice get nodes -o json names no revision in force:\n%s", want)
	}
	sameJSON(t, "GET /api/v1/fleet", s.getOK(t, "/api/v1/fleet"), want)
	var node struct{ RevisionInForce string }
	if body := s.getOK(t, "/api/v1/nodes/node-01"); json.Unmarshal(body, &node) != nil || node.RevisionInForce != "rev-2" {
		t.Errorf("GET /api/v1/nodes/node-01: %s, want revisionInForce rev-2", body)
	}

	// Last-applied moves to a revision that gives node-01 another config.
	rev3 := &sluicev1.Revision{Id: "rev-3", Intents: []*sluicev1.Intent{{Name: "mgmt", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 110, Vni: 10110}}}}}
	if _, err := revs.Create(ctx, rev3.GetId(), rev3); err != nil {
		t.Fatal(err)
	}
	if _, err := refs.Mutate(ctx, contract.KeyLastApplied, func(*sluicev1.RolloutRef) (*sluicev1.RolloutRef, error) {
		return &sluicev1.RolloutRef{Rollout: "3-rev3", Revision: "rev-3", Generation: 3}, nil
	}); err != nil {
		t.Fatal(err)
	}
	nextFleet(t, ch, "node-01 back on its status's rev-1", func(u fleetUpdate) bool {
		rev, _, _, ok := u.nodeIn("node-01")
		return ok && rev == "rev-1"
	})
	sameJSON(t, "GET /api/v1/fleet after the move", s.getOK(t, "/api/v1/fleet"), sluiceJSON(t, env, "get", "nodes", "-o", "json"))
}

// getOK is the body of a 200 answer to GET path.
func (s served) getOK(t *testing.T, path string) []byte {
	t.Helper()
	code, body := s.get(t, path, "")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

// TestFleet_NodeThatLeaves_KeepsItsDomain (issue 42 item 5): a node whose
// presence goes (it left, or was revoked) while its status stays keeps the
// domain its labels gave it, shown as not present, rather than "no zone".
func TestFleet_NodeThatLeaves_KeepsItsDomain(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	nextFleet(t, ch, "the snapshot", func(u fleetUpdate) bool { _, _, _, ok := u.nodeIn("node-01"); return ok })
	if err := env.Buckets.Nodes.Delete(context.Background(), "node-01"); err != nil { // as sluice creds revoke does
		t.Fatal(err)
	}
	u := nextFleet(t, ch, "node-01 gone", func(u fleetUpdate) bool { _, _, present, ok := u.nodeIn("node-01"); return ok && !present })
	if _, domain, _, _ := u.nodeIn("node-01"); strings.Join(domain, "/") != "zone-a/rack-1" {
		t.Errorf("node-01's domain after it left: %q, want zone-a/rack-1", domain)
	}
}

// TestFleet_NodeThatLeftBeforeAStart_PlacedByItsStatus (issue 42 item 5):
// a node that left before the dashboard started has no presence to take
// its labels from; its status carries the labels its agent last wrote, and
// they place it in its zone and rack. A status without labels (an older
// agent's) still leaves its node under "(no zone)".
func TestFleet_NodeThatLeftBeforeAStart_PlacedByItsStatus(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	st := &sluicev1.NodeStatus{Node: "node-04", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "rev-1",
		LastUpdate: timestamppb.Now(), NodeLabels: map[string]string{"zone": "zone-b", "rack": "rack-9"}}
	if _, err := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Create(context.Background(), "node-04", st); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	u := nextFleet(t, ch, "the snapshot", func(u fleetUpdate) bool { _, _, _, ok := u.nodeIn("node-04"); return ok })
	_, domain, present, _ := u.nodeIn("node-04")
	if present || strings.Join(domain, "/") != "zone-b/rack-9" {
		t.Errorf("node-04 (a status with labels, no presence): domain %q, present %v; want zone-b/rack-9, not present", domain, present)
	}
	if _, domain, _, ok := u.nodeIn("node-03"); !ok || len(domain) != 0 {
		t.Errorf("node-03 (a status without labels, no presence): domain %q, found %v; want none (no zone)", domain, ok)
	}
}

// TestCoordinator_EpochPublishedAfterTheLease_IsOneTerm (issue 42 item 5):
// a new leader writes its lease without an epoch and publishes the term's
// epoch in it once its fence is written. That is one term, not a takeover:
// the panel names no term before ("dev, term ?" did).
func TestCoordinator_EpochPublishedAfterTheLease_IsOneTerm(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	ctx := context.Background()
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	acquired := timestamppb.Now()
	if _, err := leases.Create(ctx, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "dev", Session: "s1", AcquiredAt: acquired, RenewedAt: acquired}); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	nextUpdate(t, ch, "dev's lease", func(u panelsUpdate) bool { return u.Coordinator != nil && u.Coordinator.Lease.Holder == "dev" })
	if _, err := leases.Mutate(ctx, contract.LeaseCoordinator, func(l *sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
		l.Epoch, l.RenewedAt = 1, timestamppb.Now()
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	u := nextUpdate(t, ch, "term 1 published", func(u panelsUpdate) bool { return u.Coordinator != nil && u.Coordinator.Lease.Epoch == 1 })
	if u.Coordinator.Before != nil {
		t.Errorf("term before %+v, want none: the epoch published is the same term", u.Coordinator.Before)
	}
	// A takeover by another instance still names the term before.
	if _, err := leases.Mutate(ctx, contract.LeaseCoordinator, func(*sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
		return &sluicev1.LeaderLease{Holder: "coord-b", Session: "s2", AcquiredAt: timestamppb.Now()}, nil
	}); err != nil {
		t.Fatal(err)
	}
	u = nextUpdate(t, ch, "the takeover", func(u panelsUpdate) bool { return u.Coordinator != nil && u.Coordinator.Lease.Holder == "coord-b" })
	if u.Coordinator.Before == nil || u.Coordinator.Before.Holder != "dev" {
		t.Errorf("term before %+v, want dev's", u.Coordinator.Before)
	}
	if _, err := leases.Mutate(ctx, contract.LeaseCoordinator, func(l *sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
		l.Epoch = 2
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	u = nextUpdate(t, ch, "term 2 published", func(u panelsUpdate) bool { return u.Coordinator != nil && u.Coordinator.Lease.Epoch == 2 })
	if u.Coordinator.Before == nil || u.Coordinator.Before.Holder != "dev" {
		t.Errorf("term before %+v after coord-b published its epoch, want still dev's", u.Coordinator.Before)
	}
}
