package buckets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
)

// waitFor returns the stream config of w, waiting with backoff while it is
// missing (its manager has not created it yet) or JetStream is not ready.
func (c openConfig) waitFor(ctx context.Context, js jetstream.JetStream, w want, component string) (jetstream.StreamConfig, error) {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cfg, err := streamConfig(ctx, js, w.stream())
		// Between creating a bucket and enabling atomic publish on it
		// (CreateKeyValue cannot), its manager leaves a moment in which the
		// bucket exists without it: wait for the update, as for the bucket.
		// A manager of an older version never makes it: the log says so.
		upgrading := err == nil && w.sc.AllowAtomicPublish && !cfg.AllowAtomicPublish
		if err == nil && !upgrading {
			return cfg, nil
		}
		if upgrading {
			if err := w.verify(cfg, component); err != nil {
				return cfg, err // a mismatch no waiting mends
			}
		}
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) && !transient(err) {
			return cfg, fmt.Errorf("bind %s %s: %w", w.kind(), w.name, err)
		}
		delay := retry.Next()
		ev := c.log.Info().Str(w.kind(), w.name).Str("manager", contract.Manager(w.name)).Int("attempt", attempt).Dur("retry_in", delay)
		switch {
		case upgrading:
			ev.Msgf("waiting for bucket %s to allow atomic publish, enabled by %s (start a %s of this version)",
				w.name, contract.Manager(w.name), contract.Manager(w.name))
		case errors.Is(err, jetstream.ErrStreamNotFound):
			ev.Msgf("waiting for %s %s, created by %s", w.kind(), w.name, contract.Manager(w.name))
		default:
			ev.Err(err).Msgf("waiting for %s %s: JetStream not ready", w.kind(), w.name)
		}
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return cfg, fmt.Errorf("waiting for %s %s, created by %s: %w", w.kind(), w.name, contract.Manager(w.name), err)
		}
	}
}

// bind opens the KV handle of w, retrying with backoff while JetStream
// does not answer in time (a server of the cluster just stopped, leaders
// being elected): a component starting then waits, it does not fail (chaos
// seed 186: an agent stopped by itself at "open bucket sluice-control:
// context deadline exceeded").
func (c openConfig) bind(ctx context.Context, js jetstream.JetStream, w want) (jetstream.KeyValue, error) {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(cctx, w.name)
		cancel()
		if err == nil {
			return kv, nil
		}
		if ctx.Err() != nil || !transient(err) {
			return nil, fmt.Errorf("open bucket %s: %w", w.name, err)
		}
		delay := retry.Next()
		c.log.Info().Str("bucket", w.name).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for bucket %s: JetStream not answering", w.name)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", w.name, err)
		}
	}
}

// transient errors pass once the cluster has elected its leaders.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503)
}

// streamConfig reads a stream's config with a per-call timeout, so that a
// cluster still electing a leader is retried rather than waited on forever.
func streamConfig(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamConfig, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(cctx, name)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return jetstream.StreamConfig{}, fmt.Errorf("stream %s: %w", name, nats.ErrTimeout)
		}
		return jetstream.StreamConfig{}, err
	}
	return st.CachedInfo().Config, nil
}
