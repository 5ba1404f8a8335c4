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

// panelsUpdate is the parts of a stream update the panels beside the map use.
type panelsUpdate struct {
	Coordinator *struct {
		Lease struct {
			Holder string
			Epoch  uint64
		}
		LeaseTTL, Ended string
		Before          *struct{ Holder string }
	}
	Freezes    *[]json.RawMessage
	Registries *[]struct {
		Name    string
		Pending []struct{ Intent string }
	}
	Timelines []struct {
		Rollout string
		Plan    []struct{ Nodes int }
	}
}

// nextUpdate waits for the next update of ch that satisfies ok.
func nextUpdate(t *testing.T, ch <-chan sseMsg, what string, ok func(panelsUpdate) bool) panelsUpdate {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, open := <-ch:
			if !open {
				t.Fatalf("%s: the stream ended", what)
			}
			var u panelsUpdate
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

// TestStream_CoordinatorFreezesRegistries: the stream carries the
// coordinator panel (lease holder, term, lease TTL; how the lease ended and
// the term before), the freezes as `sluice get freezes -o json` lists them,
// the registries' statuses with their pending deletions and each rollout's
// plan.
func TestStream_CoordinatorFreezesRegistries(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	ctx := context.Background()
	now := time.Now().UTC()
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	if _, err := leases.Create(ctx, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "coord-a", Session: "s-a", Epoch: 6, AcquiredAt: timestamppb.New(now)}); err != nil {
		t.Fatal(err)
	}
	freeze := &sluicev1.Freeze{Id: "xmas", From: timestamppb.New(now), To: timestamppb.New(now.Add(time.Hour)), Reason: "change freeze", By: "ops@host"}
	if _, err := store.New(env.Buckets.Control, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }).Create(ctx, contract.FreezeKey("xmas"), freeze); err != nil {
		t.Fatal(err)
	}
	reg := &sluicev1.RegistryStatus{Name: "git", Kind: "directory", State: sluicev1.RegistryState_REGISTRY_STATE_SYNCED,
		Pending: []*sluicev1.PendingDeletion{{Intent: "layer2network/old", MissingSince: timestamppb.New(now), EffectiveAt: timestamppb.New(now.Add(time.Minute))}}}
	if _, err := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }).Create(ctx, "git", reg); err != nil {
		t.Fatal(err)
	}
	s := serve(t, env, dashboard.Options{})
	ch, _ := s.stream(t, "")
	u := nextUpdate(t, ch, "the snapshot", func(panelsUpdate) bool { return true })
	if c := u.Coordinator; c == nil || c.Lease.Holder != "coord-a" || c.Lease.Epoch != 6 || c.LeaseTTL != contract.DefaultSettings().LeaderLease.String() {
		t.Errorf("coordinator %+v, want coord-a in term 6 with the lease's TTL", c)
	}
	want := sluiceJSON(t, env, "get", "freezes", "-o", "json")
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(want, &list); err != nil || len(list.Items) != 1 || u.Freezes == nil || len(*u.Freezes) != 1 {
		t.Fatalf("freezes %v, want the one sluice get freezes lists (%s)", u.Freezes, want)
	}
	sameJSON(t, "the stream's freeze", (*u.Freezes)[0], list.Items[0])
	if u.Registries == nil || len(*u.Registries) != 1 || (*u.Registries)[0].Name != "git" || len((*u.Registries)[0].Pending) != 1 || (*u.Registries)[0].Pending[0].Intent != "layer2network/old" {
		t.Errorf("registries %+v, want git with its pending deletion", u.Registries)
	}
	if len(u.Timelines) != 1 || u.Timelines[0].Rollout != "1-rev1" || len(u.Timelines[0].Plan) != 1 || u.Timelines[0].Plan[0].Nodes != 3 {
		t.Errorf("timelines %+v, want 1-rev1's plan of 3 nodes", u.Timelines)
	}

	// A takeover: the new term names the one before; a freeze removed
	// empties the list.
	if _, err := leases.Mutate(ctx, contract.LeaseCoordinator, func(*sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
		return &sluicev1.LeaderLease{Holder: "coord-b", Session: "s-b", Epoch: 7, AcquiredAt: timestamppb.Now()}, nil
	}); err != nil {
		t.Fatal(err)
	}
	u = nextUpdate(t, ch, "the takeover", func(u panelsUpdate) bool { return u.Coordinator != nil })
	if c := u.Coordinator; c.Lease.Holder != "coord-b" || c.Lease.Epoch != 7 || c.Before == nil || c.Before.Holder != "coord-a" {
		t.Errorf("after the takeover: %+v, want coord-b in term 7 after coord-a", c)
	}
	if err := env.Buckets.Leases.Delete(ctx, contract.LeaseCoordinator); err != nil {
		t.Fatal(err)
	}
	u = nextUpdate(t, ch, "the release", func(u panelsUpdate) bool { return u.Coordinator != nil })
	if c := u.Coordinator; c.Lease.Holder != "" || c.Ended != "released" || c.Before == nil || c.Before.Holder != "coord-b" {
		t.Errorf("after the release: %+v, want no holder, released, coord-b's term before", c)
	}
	if err := env.Buckets.Control.Delete(ctx, contract.FreezeKey("xmas")); err != nil {
		t.Fatal(err)
	}
	u = nextUpdate(t, ch, "the freeze removed", func(u panelsUpdate) bool { return u.Freezes != nil })
	if len(*u.Freezes) != 0 {
		t.Errorf("freezes after the remove: %s", *u.Freezes)
	}
}

// TestAPI_Node_DiffAndOperations: a node's answer carries the diff of its
// desired config against its backup, and its own events (no other node's).
func TestAPI_Node_DiffAndOperations(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	seedFleet(t, env)
	ctx := context.Background()
	l2 := func(name string, vlan uint32) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 100}}}
	}
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	for key, c := range map[string]*sluicev1.DesiredConfig{
		contract.BackupKey("node-03"):  {Node: "node-03", Revision: "rev-0", Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("a", 10)}}},
		contract.DesiredKey("node-03"): {Node: "node-03", Revision: "rev-1", Operation: "1-rev1/node-03/apply", Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{l2("a", 11), l2("b", 12)}}},
	} {
		c.Fingerprint = render.Fingerprint(c.GetConfig())
		if _, err := configs.Create(ctx, key, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, ev := range []*sluicev1.Event{
		{Component: contract.ComponentCoordinator, Kind: contract.KindNode, Id: "node-03", Node: "node-03", Type: "NodeConfigured", Rollout: "1-rev1", Reason: "desired written"},
		{Component: contract.ComponentAgent, Kind: contract.KindNode, Id: "node-01", Node: "node-01", Type: "NodeProvisioned", Rollout: "1-rev1"},
		{Component: contract.ComponentAgent, Kind: contract.KindNode, Id: "node-03", Node: "node-03", Type: "NodeInvalid", Rollout: "1-rev1", Reason: "check ping failed"},
	} {
		ev.Time = timestamppb.Now()
		b, _ := store.Marshal(ev)
		if _, err := env.JS.Publish(ctx, contract.EventSubjectOf(contract.RoleOfComponent(ev.GetComponent()), ev.GetKind(), ev.GetId()), b); err != nil {
			t.Fatal(err)
		}
	}
	s := serve(t, env, dashboard.Options{})
	code, body := s.get(t, "/api/v1/nodes/node-03", "")
	var n struct {
		Diff       []struct{ Op, Intent, From, To string }
		Operations []struct {
			Event struct{ Type, Node, Reason string }
		}
	}
	if code != 200 || json.Unmarshal(body, &n) != nil {
		t.Fatalf("GET /api/v1/nodes/node-03: %d %s", code, body)
	}
	if len(n.Diff) != 2 || n.Diff[0].Op != "~" || n.Diff[0].Intent != "layer2network/a" || !strings.Contains(n.Diff[0].From, `"vlan":10`) || !strings.Contains(n.Diff[0].To, `"vlan":11`) ||
		n.Diff[1].Op != "+" || n.Diff[1].Intent != "layer2network/b" {
		t.Errorf("diff %+v, want ~ layer2network/a (vlan 10 → 11) and + layer2network/b\n%s", n.Diff, body)
	}
	if len(n.Operations) != 2 || n.Operations[0].Event.Type != "NodeConfigured" || n.Operations[1].Event.Type != "NodeInvalid" || n.Operations[1].Event.Reason != "check ping failed" {
		t.Errorf("operations %+v, want node-03's NodeConfigured then NodeInvalid", n.Operations)
	}
	code, body = s.get(t, "/api/v1/nodes/node-01", "")
	if code != 200 || !strings.Contains(string(body), `"diff": []`) || strings.Count(string(body), `"type":`) != 1 {
		t.Errorf("node-01 (no configs, one event): %d %s", code, body)
	}
}
