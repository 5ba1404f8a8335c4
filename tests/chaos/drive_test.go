package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// unansweredWatches is a rollouts bucket whose watches are never made:
// Watch waits until its context ends, as nats.go's does when the
// consumer-create request went out as the server stopped (seed 1344).
// Everything else is the real bucket's.
type unansweredWatches struct{ jetstream.KeyValue }

func (unansweredWatches) Watch(ctx context.Context, _ string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The watch only speeds waitPhase up: a watch whose creation is never
// answered must not keep it from reading the record (seed 1344: the driver
// sat in Watch until the seed's deadline, its rollout long Succeeded).
func TestWaitPhase_WatchNeverMade_ReadsTheRecord(t *testing.T) {
	const id = "3-33b97297ad6f"
	tests := []struct {
		name  string
		first sluicev1.RolloutPhase
		later time.Duration // then Succeeded; 0: first stays
	}{
		{name: "ended before the wait", first: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED},
		{name: "ends during the wait", first: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, later: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			bucket := env.Buckets.Rollouts
			env.Buckets.Rollouts = unansweredWatches{bucket}
			s := &system{t: t, env: env}
			put := func(phase sluicev1.RolloutPhase) error {
				b, err := store.Marshal(&sluicev1.Rollout{Id: id, Phase: phase})
				if err == nil {
					_, err = bucket.Put(context.Background(), id, b)
				}
				return err
			}
			if err := put(tt.first); err != nil {
				t.Fatal(err)
			}
			wrote := make(chan error, 1)
			go func() {
				if tt.later == 0 {
					wrote <- nil
					return
				}
				time.Sleep(tt.later)
				wrote <- put(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
			}()
			// Without the fix waitPhase returns only when ctx ends, with
			// the harness's error; with it, within a few polls.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			ok, err := s.waitPhase(ctx, id, 30*time.Second, ended)
			if !ok || err != nil {
				t.Errorf("waitPhase = %v, %v after %s; want true, nil", ok, err, time.Since(start).Round(time.Millisecond))
			}
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
		})
	}
}
