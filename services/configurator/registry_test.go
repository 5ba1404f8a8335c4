package configurator_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// writeNet writes a one-intent file declaring layer2 network name.
func writeNet(t *testing.T, dir, name string, vlan int) {
	t.Helper()
	doc := fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d}\n", name, vlan, 10000+vlan)
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

func addRegistry(t *testing.T, env *natstest.Env, spec *sluicev1.RegistrySpec) {
	t.Helper()
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	if _, err := specs.Create(context.Background(), contract.RegistryKey(spec.GetName()), spec); err != nil {
		t.Fatalf("store registry spec: %v", err)
	}
}

func dirSpec(name, dir string) *sluicev1.RegistrySpec {
	return &sluicev1.RegistrySpec{Name: name, SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: dir}}}
}

func registryStatus(t *testing.T, env *natstest.Env, name string) *sluicev1.RegistryStatus {
	t.Helper()
	st := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} })
	e, err := st.Get(context.Background(), name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("read registry status: %v", err)
	}
	return e.Value
}

// waitSyncs waits until registry name has synced n more times, told by
// the last_sync its status records after each sync.
func waitSyncs(t *testing.T, env *natstest.Env, name string, n int) {
	t.Helper()
	last := registryStatus(t, env, name).GetLastSync().AsTime()
	for i := range n {
		natstest.Eventually(t, wait, fmt.Sprintf("sync %d of %d more of registry %s", i+1, n, name), func() bool {
			at := registryStatus(t, env, name).GetLastSync().AsTime()
			if !at.After(last) {
				return false
			}
			last = at
			return true
		})
	}
}

// waitStored waits until intents/<key> satisfies cond.
func waitStored(t *testing.T, env *natstest.Env, key, what string, cond func(*sluicev1.StoredIntent) bool) {
	t.Helper()
	s := intentsStore(env)
	natstest.Eventually(t, wait, what, func() bool {
		e, err := s.Get(context.Background(), key)
		if errors.Is(err, store.ErrNotFound) {
			return cond(nil)
		}
		return err == nil && cond(e.Value)
	})
}

func TestDirectoryRegistry_SyncsInPlace(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	dir := t.TempDir()
	writeNet(t, dir, "red", 100)
	writeNet(t, dir, "green", 101)
	writeNet(t, dir, "blue", 102)
	// A removed file is marked once every answer lacked it for 1s: with
	// the 1s sync interval, a second answer or two.
	start(t, env, func(c *configurator.Config) { c.DeleteAfter = new(time.Second) })
	addRegistry(t, env, dirSpec("gitops", dir))

	waitStored(t, env, "layer2network.blue", "blue synced from the directory", func(v *sluicev1.StoredIntent) bool {
		return v != nil && v.GetSource() == "gitops" && v.GetOrigin() == "blue.yaml"
	})
	natstest.Eventually(t, wait, "the head to hold the three networks", func() bool {
		h := headNow(t, env)
		return h != nil && len(getRevision(t, env, h.GetRevision()).GetIntents()) == 3
	})
	natstest.Eventually(t, wait, "status SYNCED with 3 intents", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 3
	})

	// Edit one, add one, remove one: each reflected in place.
	writeNet(t, dir, "red", 110)
	writeNet(t, dir, "cyan", 103)
	if err := os.Remove(filepath.Join(dir, "green.yaml")); err != nil {
		t.Fatal(err)
	}
	waitStored(t, env, "layer2network.red", "red's new VLAN", func(v *sluicev1.StoredIntent) bool {
		return v.GetIntent().GetLayer2Network().GetVlan() == 110
	})
	waitStored(t, env, "layer2network.cyan", "cyan created", func(v *sluicev1.StoredIntent) bool { return v != nil })
	waitStored(t, env, "layer2network.green", "green marked after the settle period", func(v *sluicev1.StoredIntent) bool { return v.GetMarkedForDeletion() })
	natstest.Eventually(t, wait, "green announced pending first", func() bool {
		p := evs.ofType("RegistryDeletionPending")
		return len(p) > 0 && strings.Contains(p[0].GetReason(), "layer2network/green at ")
	})

	// The API may not change what the registry owns.
	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{{Name: "red",
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 999, Vni: 999}}}}})
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Code != contract.ErrCodeConflict || !strings.Contains(apiErr.Error(), "owned by registry gitops (declared in red.yaml)") {
		t.Fatalf("apply of a registry's intent: %v, want 409 naming the registry and file", err)
	}
	if _, err := del(t, env.Conn, "Layer2Network", "red"); !errors.As(err, &apiErr) || apiErr.Code != contract.ErrCodeConflict {
		t.Fatalf("delete of a registry's intent: %v, want 409", err)
	}

	// Emptying the directory is held, nothing marked, until confirmed.
	for _, n := range []string{"red", "blue", "cyan"} {
		if err := os.Remove(filepath.Join(dir, n+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	var held *sluicev1.HeldDeletion
	natstest.Eventually(t, wait, "the deletion to be held", func() bool {
		st := registryStatus(t, env, "gitops")
		held = st.GetHeld()
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD
	})
	if len(held.GetIntents()) != 3 || held.GetDigest() == "" {
		t.Fatalf("held %v, want red, blue and cyan", held)
	}
	if v := getStored(t, env, "layer2network.red"); v.GetMarkedForDeletion() {
		t.Fatalf("red was marked although the deletion is held")
	}
	natstest.Eventually(t, wait, "one RegistryDeletionHeld event", func() bool { return len(evs.ofType("RegistryDeletionHeld")) == 1 })
	confirms := store.New(env.Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
	if _, err := confirms.Create(context.Background(), contract.RegistryConfirmKey("gitops"), &sluicev1.RegistryConfirm{Digest: held.GetDigest(), By: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"layer2network.red", "layer2network.blue", "layer2network.cyan"} {
		waitStored(t, env, k, k+" marked after the confirmation", func(v *sluicev1.StoredIntent) bool { return v.GetMarkedForDeletion() })
	}
	natstest.Eventually(t, wait, "a RegistryDeletionConfirmed event", func() bool {
		return len(evs.ofType("RegistryDeletionConfirmed")) == 1
	})
	// Every stored intent is still there, marked: the reaper removes them.
	for _, k := range []string{"layer2network.red", "layer2network.green", "layer2network.blue", "layer2network.cyan"} {
		if v := getStored(t, env, k); v == nil {
			t.Fatalf("%s was deleted by the sync; only the reaper deletes", k)
		}
	}
}

func TestDirectoryRegistry_ConflictWithAPIReportedNotOverwritten(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	start(t, env)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{{Name: "red",
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 100, Vni: 10100}}}}})
	dir := t.TempDir()
	writeNet(t, dir, "red", 300)
	writeNet(t, dir, "blue", 301)
	addRegistry(t, env, dirSpec("gitops", dir))
	waitStored(t, env, "layer2network.blue", "blue synced", func(v *sluicev1.StoredIntent) bool { return v != nil })
	if v := getStored(t, env, "layer2network.red"); v.GetSource() != "api" || v.GetIntent().GetLayer2Network().GetVlan() != 100 {
		t.Fatalf("red is %v: the api's intent was overwritten", v)
	}
	natstest.Eventually(t, wait, "the conflict in the status", func() bool {
		c := registryStatus(t, env, "gitops").GetConflicts()
		return len(c) == 1 && c[0].GetOwner() == "api"
	})
	natstest.Eventually(t, wait, "one IntentConflict event", func() bool { return len(evs.ofType("IntentConflict")) == 1 })
	// Two more syncs: the first would announce the conflict again, and its
	// event arrives long before the second's status (a sync interval later).
	waitSyncs(t, env, "gitops", 2)
	if n := len(evs.ofType("IntentConflict")); n != 1 {
		t.Fatalf("%d IntentConflict events, want one", n)
	}
}

func TestDirectoryRegistry_InvalidIntentKeepsLastValid(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	dir := t.TempDir()
	writeNet(t, dir, "red", 100)
	addRegistry(t, env, dirSpec("gitops", dir))
	waitStored(t, env, "layer2network.red", "red synced", func(v *sluicev1.StoredIntent) bool { return v != nil })
	writeNet(t, dir, "red", 5000) // out of range
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("kind: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeNet(t, dir, "blue", 101)
	waitStored(t, env, "layer2network.blue", "blue synced beside the invalid ones", func(v *sluicev1.StoredIntent) bool { return v != nil })
	if v := getStored(t, env, "layer2network.red"); v.GetIntent().GetLayer2Network().GetVlan() != 100 || v.GetMarkedForDeletion() {
		t.Fatalf("red is %v, want its last valid version (VLAN 100) in force", v)
	}
	// The status is written after the sync that stored blue committed.
	var got []string
	natstest.Eventually(t, wait, "the status to report red's VLAN and broken.yaml", func() bool {
		got = got[:0]
		for _, fe := range registryStatus(t, env, "gitops").GetInvalid() {
			got = append(got, fe.GetIntent()+" "+fe.GetField())
		}
		all := strings.Join(got, ",")
		return len(got) == 2 && strings.Contains(all, "layer2network/red spec.vlan") && strings.Contains(all, "broken.yaml")
	})
}

// A request that arrives before the first sync of every registry is
// answered after it, not refused and not racing it: here the first fetch
// hangs (a server that accepts and never answers) until the fetch timeout.
func TestBootstrap_RequestsWaitForFirstSync(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	addr, _ := silentServer(t)
	addRegistry(t, env, &sluicev1.RegistrySpec{Name: "slow", Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{
		Url: "redis://" + addr + "/0"}}})
	// Margin: the wall clock bounds the answer from below only (the fetch
	// must time out first), which load can only make longer.
	const fetchTimeout = 2 * time.Second
	began := time.Now()
	start(t, env, func(c *configurator.Config) { c.FetchTimeout = fetchTimeout })
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{{Name: "red",
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 100, Vni: 10100}}}}})
	if !resp.GetChanged() {
		t.Fatalf("apply answered %v, want it applied", resp)
	}
	st := registryStatus(t, env, "slow")
	if st.GetState() != sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE {
		t.Fatalf("the apply was answered before the registry's first sync attempt ended (status %v)", st)
	}
	if waited := time.Since(began); waited < fetchTimeout {
		t.Fatalf("answered after %s, before the first fetch could time out", waited)
	}
}

// The pending deletions live in the registry's status: a configurator
// started again carries on with them, from when each went missing.
func TestDirectoryRegistry_PendingDeletionSurvivesARestart(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	dir := t.TempDir()
	writeNet(t, dir, "red", 100)
	writeNet(t, dir, "green", 101)
	writeNet(t, dir, "blue", 102)
	hour := func(c *configurator.Config) { c.DeleteAfter = new(time.Hour) }
	first := start(t, env, hour)
	addRegistry(t, env, dirSpec("gitops", dir))
	waitStored(t, env, "layer2network.blue", "blue synced", func(v *sluicev1.StoredIntent) bool { return v != nil })
	if err := os.Remove(filepath.Join(dir, "green.yaml")); err != nil {
		t.Fatal(err)
	}
	var before *sluicev1.PendingDeletion
	natstest.Eventually(t, wait, "green pending", func() bool {
		p := registryStatus(t, env, "gitops").GetPending()
		if len(p) == 1 {
			before = p[0]
		}
		return before != nil
	})
	first.stop(t)

	start(t, env, hour)
	waitSyncs(t, env, "gitops", 2)
	p := registryStatus(t, env, "gitops").GetPending()
	if len(p) != 1 || p[0].GetIntent() != "layer2network/green" || !p[0].GetMissingSince().AsTime().Equal(before.GetMissingSince().AsTime()) {
		t.Fatalf("pending after a restart %v, want green missing since %v, as before", p, before.GetMissingSince().AsTime())
	}
	if v := getStored(t, env, "layer2network.green"); v.GetMarkedForDeletion() {
		t.Fatalf("green marked before its settle period ended")
	}
}

// A pause is acknowledged while a registry's fetch hangs: the fetch changes
// nothing, so only the commit after it is a request the pause waits for
// (a stuck registry once held sluice pause --wait for good).
func TestPause_IsNotHeldByAHungFetch(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	addr, accepted := silentServer(t)
	// Redis's own read timeout (5 s) would end each try and let the pause
	// in between them: the URL lifts it, so the fetch hangs for real.
	addRegistry(t, env, &sluicev1.RegistrySpec{Name: "stuck", Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{
		Url: "redis://" + addr + "/0?read_timeout=10m"}}})
	// Margin: the fetch hangs for its whole timeout, 5 minutes; the pause
	// must be acknowledged long before (within the 30 s wait).
	start(t, env, func(c *configurator.Config) { c.FetchTimeout = 5 * time.Minute; c.Instance = "c1" })
	select {
	case <-accepted:
	case <-time.After(wait):
		t.Fatal("the registry's fetch never reached the server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reqs := store.New(env.Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	if _, err := reqs.Create(ctx, contract.KeyPause, &sluicev1.PauseRequest{Paused: true, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	insts := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	natstest.Eventually(t, wait, "the configurator to acknowledge the pause while its fetch hangs", func() bool {
		e, err := insts.Get(ctx, contract.InstanceKey(configurator.Component, "c1"))
		return err == nil && e.Value.GetPause().GetGeneration() == 1 && e.Value.GetPause().GetPaused()
	})
}

// silentServer listens on a loopback address and accepts every connection
// without ever answering, until the test ends; accepted receives once a
// connection was accepted.
func silentServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() }) // accepted, never answered
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ln.Addr().String(), ch
}
