package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/reaper"
)

// referencesNow lists what must not be deleted right now, and checks it
// is stored: every revision the head, a rollout pointer, a rollout record or
// a node config names, and every intent of a revision the head, a rollout
// pointer or a node config names (the rules of docs/reaper.md). A miss is
// reported only if the reference still stands when read again: a reference
// that moved on between the two reads released what it named, and the
// reaper may have collected it in between.
func referencesNow(t *testing.T, env *natstest.Env) (violations []string) {
	t.Helper()
	ctx := context.Background()
	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	records := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	intents := store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })

	type ref struct {
		by          string
		revision    string
		withIntents bool
		still       func() bool // the reference still names revision
	}
	var all []ref
	if h, err := heads.Get(ctx, contract.KeyHead); err == nil && h.Value.GetRevision() != "" {
		rev := h.Value.GetRevision()
		all = append(all, ref{"the head", rev, true, func() bool {
			h, err := heads.Get(ctx, contract.KeyHead)
			return err == nil && h.Value.GetRevision() == rev
		}})
	}
	for _, k := range []string{contract.KeyActive, contract.KeyLastApplied} {
		if e, err := refs.Get(ctx, k); err == nil {
			rev := e.Value.GetRevision()
			all = append(all, ref{"rollouts/" + k, rev, true, func() bool {
				e, err := refs.Get(ctx, k)
				return err == nil && e.Value.GetRevision() == rev
			}})
		}
	}
	recs, err := records.List(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range recs {
		if e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied || contract.IsControlKey(e.Key) || e.Err != nil {
			continue
		}
		key := e.Key
		for _, rev := range []string{e.Value.GetRevision(), e.Value.GetPreviousRevision()} {
			if rev == "" {
				continue
			}
			all = append(all, ref{"rollouts/" + key, rev, false, func() bool {
				_, err := records.Get(ctx, key)
				return err == nil
			}})
		}
	}
	cfgs, err := configs.List(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cfgs {
		if contract.IsControlKey(e.Key) || e.Err != nil || e.Value.GetRevision() == "" {
			continue
		}
		key, rev := e.Key, e.Value.GetRevision()
		all = append(all, ref{"nodeconfigs/" + key, rev, true, func() bool {
			e, err := configs.Get(ctx, key)
			return err == nil && e.Value.GetRevision() == rev
		}})
	}
	for _, r := range all {
		rev, err := revs.Get(ctx, r.revision)
		if errors.Is(err, store.ErrNotFound) {
			if r.still() {
				violations = append(violations, fmt.Sprintf("revision %.12s, referenced by %s, was deleted", r.revision, r.by))
			}
			continue
		}
		if err != nil || !r.withIntents {
			continue
		}
		for _, in := range rev.Value.GetIntents() {
			if _, err := intents.Get(ctx, intent.Key(in)); errors.Is(err, store.ErrNotFound) && r.still() {
				violations = append(violations, fmt.Sprintf("intent %s of revision %.12s, referenced by %s, was deleted", intent.ID(in), r.revision, r.by))
			}
		}
	}
	return violations
}

// I5 as a property: random interleavings of registry syncs (a directory
// registry whose files change), applies and deletes through the API,
// rollouts and reaper passes (every 100ms, keeping only 3 unreferenced
// revisions), checked after every step. SLUICE_I5_SEEDS sets how many
// seeds run (default 2); SLUICE_I5_SEED runs one.
func TestI5_NothingReferencedIsEverDeleted(t *testing.T) {
	seeds := []uint64{1, 2}
	if v := os.Getenv("SLUICE_I5_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SLUICE_I5_SEEDS=%q: %v", v, err)
		}
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	if v := os.Getenv("SLUICE_I5_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_I5_SEED=%q: %v", v, err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runI5(t, seed) })
	}
}

func runI5(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 3, nil)
	// I5 is about the reaper: with no settle period a removed file is
	// marked at the next answer, as before issue 19, so the run marks (and
	// races the reaper with) as many intents as it did. With one, files
	// added meanwhile restart it and few are ever marked.
	s.deletingAfter(0)
	s.halt("reaper")
	rp, err := reaper.New(reaper.Config{Conn: env.ConnectRole(t, creds.RoleReaper, ""), Settings: env.Settings, Log: zerolog.Nop(),
		Interval: 100 * time.Millisecond, RevisionRetention: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.run("reaper", rp.Run)
	waitRegistered(t, env, 3)
	var reaped atomic.Int64 // reaper deletions seen: the property is not checked in a vacuum
	sub, err := env.Conn.Subscribe(contract.EventsSubjectPrefix+".>", func(m *nats.Msg) {
		ev := &sluicev1.Event{}
		if store.Unmarshal(m.Data, ev) == nil && (ev.GetType() == "IntentReaped" || ev.GetType() == "RevisionsReaped") {
			reaped.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := env.Conn.Flush(); err != nil { // the server has the interest before the reaper runs
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	if _, err := specs.Create(ctx, contract.RegistryKey("gitops"), &sluicev1.RegistrySpec{Name: "gitops", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: dir}}}); err != nil {
		t.Fatal(err)
	}
	if err := apiclient.WaitReady(ctx, env.Conn); err != nil {
		t.Fatal(err)
	}
	const names = 6
	mtu := map[int]int{}
	tables := map[int]bool{}
	var log []string
	for step := range 30 {
		var did string
		switch op := rng.IntN(5); op {
		case 0, 1: // a network file added or changed
			i := rng.IntN(names)
			mtu[i] = 1400 + 100*rng.IntN(5)
			doc := fmt.Sprintf("kind: Layer2Network\nname: net-%d\nspec: {vlan: %d, vni: %d, mtu: %d}\n", i, 100+i, 10100+i, mtu[i])
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("net-%d.yaml", i)), []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			did = fmt.Sprintf("wrote net-%d.yaml (mtu %d)", i, mtu[i])
		case 2: // a network file removed
			i := rng.IntN(names)
			err := os.Remove(filepath.Join(dir, fmt.Sprintf("net-%d.yaml", i)))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			delete(mtu, i)
			did = fmt.Sprintf("removed net-%d.yaml", i)
		case 3: // a routing table applied or deleted through the API
			i := rng.IntN(names)
			actx, cancel := context.WithTimeout(ctx, 15*time.Second)
			if tables[i] {
				_, err = apiclient.Delete(actx, env.Conn, &sluicev1.DeleteRequest{Kind: "RoutingTable", Name: fmt.Sprintf("table-%d", i)})
				did = fmt.Sprintf("deleted table-%d: %v", i, err)
			} else {
				_, err = apiclient.Apply(actx, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{{Name: fmt.Sprintf("table-%d", i),
					Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: uint32(1000 + i)}}}}})
				did = fmt.Sprintf("applied table-%d: %v", i, err)
			}
			cancel()
			if err == nil {
				tables[i] = !tables[i]
			}
		case 4: // time passes: rollouts and reaper passes move on
			d := time.Duration(rng.IntN(800)) * time.Millisecond
			time.Sleep(d)
			did = "waited " + d.String()
		}
		log = append(log, fmt.Sprintf("step %d: %s", step, did))
		// A random pause (as case 4's): the interleaving is the input of
		// the property, not a wait for a condition.
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		if v := referencesNow(t, env); len(v) > 0 {
			for _, l := range log {
				t.Log(l)
			}
			t.Fatalf("I5 after step %d (seed %d): %v", step, seed, v)
		}
	}
	// At rest: the last rollout ends, the invariants hold, and what the
	// reaper may collect it did collect.
	var head *sluicev1.Head
	confirms := store.New(env.Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	natstest.Eventually(t, 60*time.Second, "the registry's last change to reach the head", func() bool {
		st := registryState(t, env, "gitops")
		if h := st.GetHeld(); h != nil { // several files went at once: confirm, as an operator would
			_, _ = confirms.Mutate(ctx, contract.RegistryConfirmKey("gitops"), func(*sluicev1.RegistryConfirm) (*sluicev1.RegistryConfirm, error) {
				return &sluicev1.RegistryConfirm{Digest: h.GetDigest(), By: "i5 test"}, nil
			})
		}
		if st.GetState() != sluicev1.RegistryState_REGISTRY_STATE_SYNCED || int(st.GetIntents()) != len(mtu) {
			return false
		}
		// A file rewritten with another mtu keeps the count: the head must
		// hold what the files say, not only as many networks.
		if head = headOf(t, env); head == nil {
			return false
		}
		rev, err := revs.Get(ctx, head.GetRevision())
		if err != nil {
			return false
		}
		nets := map[string]uint32{}
		for _, in := range rev.Value.GetIntents() {
			if l2 := in.GetLayer2Network(); l2 != nil {
				nets[in.GetName()] = l2.GetMtu()
			}
		}
		for i, m := range mtu {
			if nets[fmt.Sprintf("net-%d", i)] != uint32(m) {
				return false
			}
		}
		return len(nets) == len(mtu)
	})
	r := waitRolloutEnd(t, env, head.GetGeneration(), 90*time.Second)
	assertInvariants(t, s, r)
	if v := referencesNow(t, env); len(v) > 0 {
		t.Fatalf("I5 at rest (seed %d): %v", seed, v)
	}
	if reaped.Load() == 0 {
		// A schedule may leave nothing the reaper may collect by now (on a
		// loaded machine the registry's syncs coalesce into few revisions):
		// more changes than the retention keeps make some, so the property
		// is never checked in a vacuum.
		t.Logf("seed %d: nothing reaped yet; %d changes at rest", seed, 2*3)
		for k := range 2 * 3 {
			actx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err := apiclient.Apply(actx, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{{Name: "at-rest",
				Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: uint32(2000 + k)}}}}})
			cancel()
			if err != nil {
				t.Fatalf("apply at rest: %v", err)
			}
			r := waitRolloutEnd(t, env, headOf(t, env).GetGeneration(), 90*time.Second)
			assertInvariants(t, s, r)
		}
		if v := referencesNow(t, env); len(v) > 0 {
			t.Fatalf("I5 at rest after the changes at rest (seed %d): %v", seed, v)
		}
	}
	natstest.Eventually(t, 60*time.Second, "the reaper to have deleted something", func() bool { return reaped.Load() > 0 })
	t.Logf("seed %d: %d reaper deletion events, head generation %d", seed, reaped.Load(), head.GetGeneration())
}
