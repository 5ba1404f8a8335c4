package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The pause phase: each pause stops the leader's process for pauseFor; the
// next starts pauseSpacing after the lease was seen renewed again.
const (
	pauseFor             = time.Second
	pauseSpacing         = 2 * time.Second
	failoverPauseStandby = "bench-pause-standby"
)

// pauses stops the leading successor's process for pauseFor, o.Pauses
// times, while a standby runs, with the fleet idle, and counts how often
// the lease changed term (holder, or the same holder acquiring it again):
// false_takeovers, each a takeover a live leader's pause caused. After each
// pause it waits for the lease to be renewed (by whoever holds it) before
// the next.
func (f *failover) pauses(ctx context.Context, leader Process, res *Result) error {
	if _, err := f.leading(ctx, failoverSuccessor); err != nil {
		return err
	}
	standby, err := startCoordinator(ctx, f.url, f.settings, failoverPauseStandby, f.o.Log)
	if err != nil {
		return err
	}
	defer standby.stop()
	if err := waitStandingBy(ctx, f.nc, failoverPauseStandby); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes, err := f.leases.Watch(wctx, contract.LeaseCoordinator)
	if err != nil {
		return err
	}
	var (
		mu sync.Mutex
		t  terms
	)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for e := range changes {
			mu.Lock()
			t.see(e)
			mu.Unlock()
		}
	}()
	renewedAfter := func(at time.Time) func() (bool, error) {
		return func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return t.renewed.After(at), nil
		}
	}
	// The watch delivers the lease as it is first: the term to compare with.
	if err := waitFor(ctx, time.Minute, renewedAfter(time.Time{})); err != nil {
		return fmt.Errorf("watching the lease: %w", err)
	}
	for i := range f.o.Pauses {
		if i > 0 {
			if err := sleep(ctx, pauseSpacing); err != nil {
				return err
			}
		}
		pausedAt := time.Now()
		if err := leader.Pause(ctx, pauseFor); err != nil {
			return err
		}
		// The paused leader renews nothing: a renewal stamped after the
		// pause began comes after the resume, or from a new holder.
		if err := waitFor(ctx, time.Minute+2*f.settings.LeaderLease, renewedAfter(pausedAt)); err != nil {
			return fmt.Errorf("no renewal of the lease after pause %d: %w", i+1, err)
		}
	}
	stopWatch()
	<-watched
	n := t.count()
	res.FalseTakeovers, res.FalseTakeoverPauses = &n, f.o.Pauses
	return nil
}

// terms counts the changes of term seen on the lease key: a term is a
// holder's acquisition (holder, session, acquiredAt), which renewals and
// the announcement of its epoch keep. A lease deleted or expired and not
// taken again counts as one change too.
type terms struct {
	cur     string    // the term last seen; "" before the first value
	gone    bool      // deleted or expired since
	changes int       // values seen in a term other than the one before
	renewed time.Time // the latest renewedAt seen
}

// see takes one entry of a watch on the lease key.
func (t *terms) see(e store.Entry[*sluicev1.LeaderLease]) {
	switch {
	case e.Key == "" || e.Err != nil: // the watch's "initial values done", or an unreadable value
		return
	case e.Deleted:
		t.gone = t.cur != ""
		return
	}
	v := e.Value
	id := fmt.Sprintf("%s/%s/%d", v.GetHolder(), v.GetSession(), v.GetAcquiredAt().AsTime().UnixNano())
	if t.cur != "" && id != t.cur {
		t.changes++
	}
	t.cur, t.gone = id, false
	if r := v.GetRenewedAt().AsTime(); r.After(t.renewed) {
		t.renewed = r
	}
}

// count is the number of term changes seen.
func (t *terms) count() int {
	if t.gone {
		return t.changes + 1
	}
	return t.changes
}

// sleep waits for d or ctx's end.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
