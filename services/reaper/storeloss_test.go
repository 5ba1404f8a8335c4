package reaper_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// I10: while the store is lost (no rollout record, and a live node runs a
// revision the store does not hold), the reaper deletes nothing: here a
// node long past its grace keeps its keys until an operator confirms.
func TestReaper_StoreLost_DeletesNothingUntilConfirmed(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f.seed(t, "gone")
	if _, err := f.nodes.Create(context.Background(), "live", &sluicev1.NodePresence{Node: "live",
		InForceRevision: "110b0b1c2d3e4f5a", InForceFingerprint: "fp"}); err != nil {
		t.Fatal(err)
	}
	r := f.newReaper(t, c)
	pass(t, r)
	c.Advance(10 * grace)
	pass(t, r)
	wantKeys(t, f, "gone", "desired", "backup", "status")

	control := store.New(f.env.Buckets.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} })
	if _, err := control.Create(context.Background(), contract.KeyStoreConfirm, &sluicev1.StoreConfirm{By: "ops", At: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	pass(t, r) // timer starts: the held passes timed nothing
	c.Advance(grace + time.Second)
	pass(t, r)
	wantKeys(t, f, "gone")
}
