package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// failures records what a WriteObserver is told, as "bucket kind".
type failures struct {
	mu  sync.Mutex
	got []string
}

func (f *failures) WriteFailed(bucket, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, bucket+" "+kind)
}

func (f *failures) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := f.got
	f.got = nil
	return got
}

func TestWriteObserver_IsToldOfEveryFailedWriteByBucketAndKind(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	obs := &failures{}
	store.SetWriteObserver(obs)
	t.Cleanup(func() { store.SetWriteObserver(nil) })
	// margin: only bounds a hang; every write returns with its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := store.New(env.Buckets.Status, newStatus)
	configs := store.NewBatcher(env.Conn, contract.BucketNodeConfigs)
	statusBatch := store.NewBatcher(env.Conn, contract.BucketStatus) // no atomic publish on this bucket
	cancelled, stop := context.WithCancel(ctx)
	stop()

	rev, err := st.Create(ctx, "obs", &sluicev1.NodeStatus{Node: "obs"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		write func() error
		want  []string
	}{
		{"a write that lands", func() error {
			_, err := st.Update(ctx, "obs", &sluicev1.NodeStatus{Node: "obs", Message: "x"}, rev)
			return err
		}, nil},
		{"create of an existing key", func() error {
			_, err := st.Create(ctx, "obs", &sluicev1.NodeStatus{Node: "obs"})
			return err
		}, []string{contract.BucketStatus + " conflict"}},
		{"update at a stale revision", func() error {
			_, err := st.Update(ctx, "obs", &sluicev1.NodeStatus{Node: "obs"}, rev)
			return err
		}, []string{contract.BucketStatus + " conflict"}},
		{"delete at a stale revision", func() error { return st.Delete(ctx, "obs", rev) }, []string{contract.BucketStatus + " conflict"}},
		{"a batch with a stale op", func() error {
			_, err := configs.Write(ctx, []store.Op{{Key: "n1.desired", Value: &sluicev1.DesiredConfig{Node: "n1"}, Revision: 999}}, nil)
			return err
		}, []string{contract.BucketNodeConfigs + " conflict"}},
		{"a batch the bucket refuses", func() error {
			_, err := statusBatch.Write(ctx, []store.Op{{Key: "n2", Value: &sluicev1.NodeStatus{Node: "n2"}}}, nil)
			return err
		}, []string{contract.BucketStatus + " error"}},
		{"a write its caller gave up on", func() error {
			_, err := st.Create(cancelled, "given-up", &sluicev1.NodeStatus{Node: "n3"})
			return err
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if (err != nil) != (tc.want != nil || tc.name == "a write its caller gave up on") {
				t.Fatalf("write: %v", err)
			}
			if got := obs.take(); !slices.Equal(got, tc.want) {
				t.Fatalf("observer told %q, want %q", got, tc.want)
			}
		})
	}
}
