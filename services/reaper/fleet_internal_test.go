package reaper

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The watched view follows each bucket's keys on its own: a status, a
// desired config and a backup each make their node an owner until deleted,
// control keys and keys of other names make no owner, and a watch made
// again forgets only its own part until it caught up again.
func TestWatched_FollowsEachPartsKeys(t *testing.T) {
	w := newWatched()
	if w.complete() {
		t.Fatal("complete before any watch caught up")
	}
	for _, e := range []struct {
		part    int
		key     string
		deleted bool
	}{
		{partPresence, "n1", false}, {partPresence, "n2", false}, {partPresence, "", false},
		{partStatus, "n1", false}, {partStatus, "_fence", false}, {partStatus, "", false},
		{partConfigs, "n1.desired", false}, {partConfigs, "n3.backup", false}, {partConfigs, "n4.other", false},
		{partConfigs, "_fence", false}, {partConfigs, "", false},
		{partPresence, "n2", true}, // n2's presence lapsed
	} {
		w.see(e.part, e.key, e.deleted)
	}
	if !w.complete() {
		t.Fatal("not complete after every watch caught up")
	}
	if got := w.absentOwners(); !slices.Equal(got, []string{"n3"}) {
		t.Errorf("absent owners %v, want [n3] (n1 present, n2 owns nothing, n4's key is no node's, _fence no node)", got)
	}
	if w.owners() != 2 || !w.owns("n1") || !w.present["n1"] || w.present["n2"] {
		t.Errorf("owners %d (n1 %v), present %v: want n1 and n3 owning, n1 present", w.owners(), w.owns("n1"), w.present)
	}
	w.see(partConfigs, "n3.backup", true)
	if w.owns("n3") {
		t.Error("n3 still owns keys after its only key was deleted")
	}
	w.restart(partStatus)
	if w.complete() || w.owns("n1") != true {
		t.Errorf("after the status watch restarts: complete %v, n1 owns %v; want incomplete and n1 still owning its desired config", w.complete(), w.owns("n1"))
	}
	w.see(partConfigs, "n1.desired", true)
	if w.owns("n1") {
		t.Error("n1 owns keys after its status was forgotten and its desired config deleted")
	}
	w.restart(partPresence)
	if len(w.present) != 0 {
		t.Errorf("present %v after the presence watch restarts, want forgotten", w.present)
	}
}

// While Run's watches have caught up a pass lists no keys — it works from
// the watched view —, and still reaps: a node that arrives and gets keys
// after the view was built is seen through the watches and reaped once its
// presence lapsed past grace.
func TestRun_PassesWorkFromTheWatchedView(t *testing.T) {
	defer func(n int) { relistEvery = n }(relistEvery)
	relistEvery = 1 << 30 // no relisting pass in this test
	s := contract.DefaultSettings()
	s.NodeLease = time.Second
	env := natstest.Start(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	seed := func(node string) {
		t.Helper()
		if _, err := configs.Create(ctx, contract.DesiredKey(node), formed(&sluicev1.DesiredConfig{Node: node, Fingerprint: "fp"})); err != nil {
			t.Fatal(err)
		}
		if _, err := statuses.Create(ctx, node, &sluicev1.NodeStatus{Node: node}); err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Create(ctx, node, &sluicev1.NodePresence{Node: node}); err != nil { // lapses after the 1s lease
			t.Fatal(err)
		}
	}
	gone := func(node string) bool {
		_, err1 := statuses.Get(ctx, node)
		_, err2 := configs.Get(ctx, contract.DesiredKey(node))
		return err1 != nil && err2 != nil
	}
	r, err := New(Config{Conn: env.Conn, Settings: s, Grace: 300 * time.Millisecond, Interval: 200 * time.Millisecond, HoldShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var listed uint64
	natstest.Eventually(t, 30*time.Second, "the watches to catch up", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		listed = r.listings.Load()
		return r.view != nil && r.view.complete()
	})
	if listed == 0 {
		t.Fatal("no pass listed before the watches caught up (the start pass should)")
	}
	seed("n2")
	natstest.Eventually(t, 30*time.Second, "n2's keys to be reaped", func() bool { return gone("n2") })
	r.mu.Lock()
	passes := r.passes
	r.mu.Unlock()
	if got := r.listings.Load(); got != listed {
		t.Errorf("%d passes listed keys after the watches caught up, want none (listings %d → %d)", got-listed, listed, got)
	}
	if passes < 3 {
		t.Errorf("%d passes, want several (interval 200ms)", passes)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.view != nil {
		t.Error("the view outlived Run")
	}
}

// Every relistEvery-th pass lists even with a complete view, so a change a
// watch missed cannot hide a node for longer than that: here the view has
// caught up but knows nothing of n1, whose keys and lapsed presence only a
// listing finds.
func TestPass_RelistsEveryRelistEveryPasses(t *testing.T) {
	defer func(n int) { relistEvery = n }(relistEvery)
	relistEvery = 3
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if _, err := statuses.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := New(Config{Conn: env.Conn, Settings: env.Settings, Now: func() time.Time { return now }, HoldShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.view = newWatched()
	r.view.caught = [3]bool{true, true, true} // caught up, and missed n1
	timed := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, ok := r.absent["n1"]
		return ok
	}
	for i := 1; i <= 3; i++ {
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if want := i == 3; timed() != want || r.listings.Load() != map[bool]uint64{false: 0, true: 1}[want] {
			t.Fatalf("after pass %d: n1's absence timed %v, listings %d; want the third pass (only) to list and find n1", i, timed(), r.listings.Load())
		}
	}
}
