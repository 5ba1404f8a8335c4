package dashboard_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const (
	headRevA = "aaaaaaaaaaaa1111111111111111111111111111111111111111111111111111"
	headRevB = "bbbbbbbbbbbb2222222222222222222222222222222222222222222222222222"
)

// headMovedAhead stores what the store holds when the head moved before any
// coordinator started its rollout: generation 1's rollout of revision A
// succeeded, and the head is generation 2, revision B, with no rollout.
func headMovedAhead(t *testing.T, env *natstest.Env) {
	t.Helper()
	ctx := context.Background()
	at := timestamppb.New(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))
	r := &sluicev1.Rollout{Id: contract.RolloutID(1, headRevA), Revision: headRevA, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
		StartedAt: at, FinishedAt: at, Counts: &sluicev1.RolloutCounts{Total: 1, Provisioned: 1, Attempted: 1}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	h := &sluicev1.Head{Revision: headRevB, Generation: 2, UpdatedAt: at, Reason: "intents changed"}
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead, h); err != nil {
		t.Fatal(err)
	}
}

// headUpdate is the head an update carries (Head nil: it carries none).
type headUpdate struct {
	Head *struct {
		Head *struct {
			Revision   string
			Generation uint64
		}
		Unreadable string
	}
}

// TestStream_Head_IsReadFromTheStore_NotInferredFromTheRollouts (sluice
// issue 42): the page took the newest rollout's revision for the head, so
// a head that moved before any coordinator started its rollout (or while
// none leads) was not shown. The stream carries sluice-revisions/head as
// stored, and a head that does not decode as unreadable, never as none.
func TestStream_Head_IsReadFromTheStore_NotInferredFromTheRollouts(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	headMovedAhead(t, env)
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	ch, _ := s.stream(t, "")
	next := func(what string, ok func(headUpdate) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case m := <-ch:
				var u headUpdate
				if err := json.Unmarshal(m.data, &u); err != nil {
					t.Fatal(err)
				}
				if ok(u) {
					return
				}
			case <-deadline:
				t.Fatalf("no update within 10 s with %s", what)
			}
		}
	}
	next("the stored head (generation 2, revision B)", func(u headUpdate) bool {
		return u.Head != nil && u.Head.Head != nil && u.Head.Head.Revision == headRevB && u.Head.Head.Generation == 2 && u.Head.Unreadable == ""
	})
	if _, err := env.Buckets.Revisions.Put(context.Background(), contract.KeyHead, []byte("{not a head")); err != nil {
		t.Fatal(err)
	}
	next("the head unreadable", func(u headUpdate) bool {
		return u.Head != nil && u.Head.Head == nil && u.Head.Unreadable != ""
	})
}

// TestBrowser_Head_ShowsTheStoredHead: in real Chromium, the History panel
// names the stored head (revision B, generation 2, no rollout of it yet)
// although the newest rollout is of revision A, and that rollout's row
// offers Undo to this (A is not the head); a head cut after an undecodable
// one says its strategy is the default; a head that does not decode is said
// to be unreadable.
func TestBrowser_Head_ShowsTheStoredHead(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	headMovedAhead(t, env)
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	tab := rebindingBrowser(t)
	if err := chromedp.Do(tab, chromedp.Navigate(s.url+"/")); err != nil {
		t.Fatal(err)
	}
	const read = `(() => { const p = document.getElementById('head') || {dataset: {head: 'no head line'}, textContent: ''};
		return [p.dataset.head, p.textContent, String(document.querySelectorAll('#history button[data-action="undo"][data-revision="` + headRevA + `"]').length)]; })()`
	wait := func(what, state, text, undo string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := jsIn(t, tab, read)
			if got[0] == state && strings.Contains(got[1], text) && got[2] == undo {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: head line %s %q, %s Undo buttons for revision A; want %s %q, %s", what, got[0], got[1], got[2], state, text, undo)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wait("the head moved ahead of the rollouts", "not-started", "head: revision bbbbbbbbbbbb (generation 2)", "1")
	lost := &sluicev1.Head{Revision: headRevB, Generation: 3, Reason: "the head did not decode", StrategyLost: true}
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Mutate(context.Background(), contract.KeyHead,
		func(*sluicev1.Head) (*sluicev1.Head, error) { return lost, nil }); err != nil {
		t.Fatal(err)
	}
	wait("a head whose strategy was lost", "not-started", "its strategy is the default", "1")
	if _, err := env.Buckets.Revisions.Put(context.Background(), contract.KeyHead, []byte("{not a head")); err != nil {
		t.Fatal(err)
	}
	wait("the head does not decode", "unreadable", "head: unreadable (sluice-revisions/head: ", "1")
}
