package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/store"
)

// readRetry: 100 ms to 2 s: a restarted server answers within seconds; the harness must not load the cluster it checks.
var readRetry = backoff.Policy{Base: 100 * time.Millisecond, Cap: 2 * time.Second}

// readPatience bounds how long the harness keeps retrying a read that
// fails: long enough for servers it just restarted to be back with stream
// leaders elected on a loaded 2-core machine (a restart waits only for the
// meta leader; a stream info sent meanwhile times out: seed 82's "list
// fingerprints: context deadline exceeded" after an R3 server restart).
const readPatience = 60 * time.Second

// errUndecodable marks a value read that does not decode: an answer, not a
// failure to read, so it is not retried.
var errUndecodable = errors.New("undecodable")

// harnessError is the harness failing at its own part — reading the
// buckets at rest, restarting a server it stopped — rather than sluice
// breaking an invariant. The seed fails, reported as the harness's failure
// with its cause (runSeed), never as a violation.
type harnessError struct{ err error }

func (e *harnessError) Error() string { return "harness: " + e.err.Error() }
func (e *harnessError) Unwrap() error { return e.err }

func harnessErr(format string, args ...any) error {
	return &harnessError{err: fmt.Errorf(format, args...)}
}

// tries says how many tries were made over d: "1 attempt" alone (the
// time of one says nothing), else e.g. "14 attempts over 1m0.1s".
func tries(n int, one, many string, d time.Duration) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s over %s", n, many, d.Round(time.Millisecond))
}

// retry runs read until it succeeds or gives an answer
// (jetstream.ErrKeyNotFound, errUndecodable), each attempt with its own
// store.AttemptTimeout, backing off from 100ms to 2s between attempts, for
// up to readPatience or until ctx ends. Its error is the last attempt's
// (which names what it read) with how many attempts over how long.
func retry(ctx context.Context, read func(context.Context) error) error {
	start := time.Now()
	again := backoff.New(readRetry)
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		err := read(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, errUndecodable) {
			return err
		}
		wait := again.Next()
		if ctx.Err() != nil || time.Since(start)+wait > readPatience {
			return fmt.Errorf("%w (%s)", err, tries(n, "attempt", "attempts", time.Since(start)))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}
