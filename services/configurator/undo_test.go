package configurator_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// An undo's journal marks intents for deletion as well as writing others.
// Interrupted after its first mark, it is completed at the next start; if it
// cannot complete, every mark it made is taken back.
func TestRun_InterruptedUndoJournal_IsCompletedAtStart(t *testing.T) {
	env, _, _, _ := undoInterruptedAfterItsFirstMark(t)

	start(t, env)

	for _, k := range []string{"layer2network.tenant-a", "layer2network.tenant-b"} {
		if got := getStored(t, env, k); !got.GetMarkedForDeletion() {
			t.Errorf("%s = %v, want it marked for deletion by the completed undo", k, got)
		}
	}
	if h := getHead(t, env).Value; h.GetGeneration() != 2 {
		t.Errorf("head = %v, want it moved to the set without the two networks", h)
	}
}

func TestRun_UndoJournalThatCannotComplete_TakesItsMarksBack(t *testing.T) {
	env, applied, a, b := undoInterruptedAfterItsFirstMark(t)
	ctx, is := context.Background(), intentsStore(env)
	// Someone changes tenant-b meanwhile: the undo cannot complete.
	byHand := proto.Clone(b.Value).(*sluicev1.StoredIntent)
	byHand.Source = "hand"
	if _, err := is.Update(ctx, "layer2network.tenant-b", byHand, b.Revision); err != nil {
		t.Fatal(err)
	}

	start(t, env)

	if got := getStored(t, env, "layer2network.tenant-a"); !proto.Equal(got, a.Value) {
		t.Errorf("tenant-a = %v, want its mark taken back: %v", got, a.Value)
	}
	if got := getStored(t, env, "layer2network.tenant-b"); !proto.Equal(got, byHand) {
		t.Errorf("tenant-b = %v, want the hand-written value left alone", got)
	}
	if h := getHead(t, env).Value; h.GetRevision() != applied.GetRevision() || h.GetGeneration() != 1 {
		t.Errorf("head = %v, want it unmoved", h)
	}
}

// undoInterruptedAfterItsFirstMark stores the examples, then leaves what an
// undo that marks tenant-a and tenant-b for deletion leaves when it stops
// after its first mark: its journal, and tenant-a marked. It returns the
// examples' apply and the two networks as they were.
func undoInterruptedAfterItsFirstMark(t *testing.T) (env *natstest.Env, applied *sluicev1.ApplyResponse, a, b store.Entry[*sluicev1.StoredIntent]) {
	t.Helper()
	env = natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	applied = mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	r.stop(t)
	is := intentsStore(env)
	var err error
	if a, err = is.Get(ctx, "layer2network.tenant-a"); err != nil {
		t.Fatal(err)
	}
	if b, err = is.Get(ctx, "layer2network.tenant-b"); err != nil {
		t.Fatal(err)
	}
	j := &sluicev1.ApplyJournal{Source: configurator.SourceUndo, HasPrior: true, Mark: []string{"layer2network.tenant-a", "layer2network.tenant-b"},
		Prior: []*sluicev1.PriorIntent{
			{Key: "layer2network.tenant-a", Value: a.Value, KvRevision: a.Revision},
			{Key: "layer2network.tenant-b", Value: b.Value, KvRevision: b.Revision},
		}}
	if _, err := journalStore(env).Create(ctx, contract.KeyPending, j); err != nil {
		t.Fatal(err)
	}
	markedA := proto.Clone(a.Value).(*sluicev1.StoredIntent)
	markedA.MarkedForDeletion = true
	if _, err := is.Update(ctx, "layer2network.tenant-a", markedA, a.Revision); err != nil {
		t.Fatal(err)
	}
	return env, applied, a, b
}
