package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A rollout whose only window is on another day waits, saying so in its
// record and the events, and touches no node; aborted, it ends without
// having written one. A window that does not parse is refused at apply,
// naming the field.
func TestWindows_ARolloutWaitsForItsWindow(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	startSystem(t, env, t.TempDir(), 2, nil)
	waitRegistered(t, env, 2)
	ctx := context.Background()
	if err := apiclient.WaitReady(ctx, env.Conn); err != nil {
		t.Fatal(err)
	}
	_, err := apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: examplesWith(t, 300),
		Strategy: &sluicev1.Strategy{Windows: []string{"Mon-Fri 25:00-26:00"}}, Source: "e2e"})
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || len(apiErr.FieldErrors) != 1 || apiErr.FieldErrors[0].GetField() != "strategy.windows[0]" {
		t.Fatalf("apply with a bad window: %v; want a refusal naming strategy.windows[0]", err)
	}

	// A whole day, the day after tomorrow (UTC): closed now, whatever the time.
	day := time.Now().UTC().AddDate(0, 0, 2).Weekday().String()[:3]
	window := fmt.Sprintf("%s 00:00-24:00", day)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "2", Windows: []string{window}})
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var r *sluicev1.Rollout
	natstest.Eventually(t, 30*time.Second, "the rollout to say it waits for its window", func() bool {
		e, err := rollouts.Get(ctx, id)
		if err == nil {
			r = e.Value
		}
		return err == nil && strings.Contains(r.GetWaiting(), "waiting for the window "+window)
	})
	if until := r.GetWaitingUntil().AsTime(); !until.After(time.Now()) || until.Weekday().String()[:3] != day {
		t.Errorf("waiting until %s; want the start of the next %s", until, day)
	}
	desired, _, _ := stores(env)
	time.Sleep(time.Second) // Margin: a rollout that did not wait would have written within it.
	for _, n := range []string{"node-01", "node-02"} {
		if d, err := desired.Get(ctx, contract.DesiredKey(n)); err == nil && d.Value.GetRollout() == id {
			t.Fatalf("%s was written by the waiting rollout", n)
		}
	}
	abort := store.New(env.Buckets.Control, func() *sluicev1.AbortRequest { return &sluicev1.AbortRequest{} })
	if _, err := abort.Mutate(ctx, contract.AbortKey(id), func(*sluicev1.AbortRequest) (*sluicev1.AbortRequest, error) {
		return &sluicev1.AbortRequest{Rollout: id, Reason: "not this week", By: "e2e", At: timestamppb.Now()}, nil
	}); err != nil {
		t.Fatal(err)
	}
	end := waitRolloutEnd(t, env, resp.GetGeneration(), 30*time.Second)
	if end.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED || end.GetCounts().GetAttempted() != 0 || end.GetWaiting() != "" {
		t.Fatalf("aborted while waiting: %s %v waiting %q; want ABORTED, nothing attempted, not waiting", end.GetPhase(), end.GetCounts(), end.GetWaiting())
	}
}
