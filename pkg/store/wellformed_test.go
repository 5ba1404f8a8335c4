package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// foreign is valid JSON of another type (a fence) for any value: read with
// DiscardUnknown it decodes, without error, as an empty value.
const foreign = `{"holder":"x","epoch":"5"}`

// A value of another type is quarantined by every read — Get, List and
// Watch — as an undecodable one is, with the reason; a well-formed value
// beside it is read as usual.
func TestStore_MalformedValueIsQuarantinedByEveryRead(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	// margin: only bounds a hang; every call returns with its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := env.Buckets.NodeConfigs.Put(ctx, contract.BackupKey("n1"), []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	st := store.New(env.Buckets.NodeConfigs, newDesired)
	if _, err := st.Create(ctx, contract.BackupKey("n2"), desiredOf("n2", "good")); err != nil {
		t.Fatal(err)
	}
	quarantined := func(what string, e store.Entry[*sluicev1.DesiredConfig], err error) {
		t.Helper()
		if !errors.Is(err, store.ErrUndecodable) || e.Value != nil || e.Revision == 0 ||
			!strings.Contains(err.Error(), "not well-formed for its key") {
			t.Fatalf("%s of n1.backup: value %v rev %d err %v; want it quarantined (ErrUndecodable with the reason, a revision, no value)",
				what, e.Value, e.Revision, err)
		}
	}

	e, err := st.Get(ctx, contract.BackupKey("n1"))
	quarantined("Get", e, err)

	list, err := st.List(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.Entry[*sluicev1.DesiredConfig]{}
	for _, e := range list {
		got[e.Key] = e
	}
	quarantined("List", got[contract.BackupKey("n1")], got[contract.BackupKey("n1")].Err)
	if g := got[contract.BackupKey("n2")]; g.Err != nil || g.Value.GetRevision() != "good" {
		t.Fatalf("List of n2.backup: %v (%v); want the well-formed value", g.Value, g.Err)
	}

	w, err := st.Watch(ctx, contract.BackupKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-w:
		quarantined("Watch", e, e.Err)
	case <-ctx.Done():
		t.Fatal("the watcher delivered nothing")
	}
	// A live change is checked too.
	if _, err := env.Buckets.NodeConfigs.Put(ctx, contract.BackupKey("n1"), []byte(`{"node":"n1"}`)); err != nil {
		t.Fatal(err)
	}
	for e := range w {
		if e.Key == "" {
			continue // caught up
		}
		quarantined("Watch (live)", e, e.Err)
		break
	}
}
