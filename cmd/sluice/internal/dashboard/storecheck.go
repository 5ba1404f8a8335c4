package dashboard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// storeEvery is how often, by default, the dashboard checks the store for
// a loss and for storage trouble (Options.StoreEvery).
const storeEvery = 5 * time.Second

// watchStore runs checkStore every every until ctx ends.
func (s *state) watchStore(ctx context.Context, js jetstream.JetStream, every time.Duration, logf func(string, ...any)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.checkStore(ctx, js); err != nil && ctx.Err() == nil {
			logf("dashboard: %v (asking again in %s)", err, every)
		}
		t.Reset(every)
	}
}

// lossBuckets are the watched buckets a loss is judged from.
var lossBuckets = []string{contract.BucketNodes, contract.BucketRollouts, contract.BucketControl}

// checkStore notes a change of the two store banners: whether the store is
// lost (pkg/storeloss), and whether JetStream refuses writes for want of
// space (pkg/store.StorageTrouble). The loss is judged from what the
// watches keep (inForce, the rollouts, the confirmation): no read at all
// while the store records a rollout or nodes run no revision, as on a
// fresh install and in every steady state; else one Get per distinct
// revision the nodes run, whatever the fleet's size. A read or watch that
// fails says so in the banner (the error returned is for the log): it is no
// proof the store is whole.
func (s *state) checkStore(ctx context.Context, js jetstream.JetStream) error {
	s.mu.Lock()
	var running map[string]int
	ready, cannot := true, ""
	for _, b := range lossBuckets {
		ready = ready && s.ready[b]
		if e := s.watchErrors[b]; e != "" && cannot == "" {
			cannot = "watch " + b + ": " + e
		}
	}
	settled := s.lastApplied || s.confirmed || len(s.rollouts) > 0
	if !settled && ready && cannot == "" {
		running = maps.Clone(s.inForce)
		delete(running, "")
	}
	s.mu.Unlock()

	var err error
	held := map[string]bool{}
	for _, rev := range slices.Sorted(maps.Keys(running)) {
		if held[rev], err = s.held(ctx, js, rev); err != nil {
			cannot = err.Error()
			break
		}
	}
	say := ""
	switch {
	case cannot != "":
		say = "cannot tell whether the store is lost: " + cannot
		err = errors.New(say)
	case !ready:
		// The watches have not read every value yet: nothing to judge.
	default:
		if loss := storeloss.JudgeCounts(settled, running, held); loss != nil {
			say = loss.String() + ": nothing is started (no rollout, no deletion) until you recover; " + storeloss.WayOut
		}
	}
	full := ""
	if se, since := s.trouble(); se != nil {
		full = fmt.Sprintf("JetStream refuses writes since %s: %v", since.UTC().Format(time.RFC3339), se)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if (ready || cannot != "") && say != s.storeLoss {
		s.storeLoss = say
		s.note(kindStoreLoss, "", nil)
	}
	if full != s.storage {
		s.storage = full
		s.note(kindStorage, "", nil)
	}
	return err
}

// held says whether the store holds revision id (a value, readable or
// not, as storeloss.Read), binding the revisions bucket on first need.
func (s *state) held(ctx context.Context, js jetstream.JetStream, id string) (bool, error) {
	if s.revisions == nil {
		kv, err := js.KeyValue(ctx, contract.BucketRevisions)
		if err != nil {
			return false, fmt.Errorf("open bucket %s: %w", contract.BucketRevisions, err)
		}
		s.revisions = kv
	}
	_, err := store.New(s.revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Get(ctx, id)
	switch {
	case err == nil, errors.Is(err, store.ErrUndecodable):
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, id, err)
}
