package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The scenario's registry (Scenario.Registry: a directory, or a Redis on
// real time; regstore.go) and its faults. The registry is declared as
// `sluice registry add` does (a RegistrySpec in the control bucket) before
// the baseline, so that its intents are part of every revision the
// driver's changes cut; the faults then make its answers partial and
// record, for the checker (I7, Hold, ConfirmPending), when each intent was
// absent.
const (
	registryName = "gitops"
	// registrySync is the registry's sync interval: the shortest a spec
	// may have (the directory's file-system events make most syncs sooner).
	registrySync = time.Second
	// registrySettle is the configurator's settle period
	// (--registry-delete-after): an intent missing from every answer this
	// long is marked for deletion. A trickle brings every file back within
	// 2.5 s (Trickle.Gaps: 5 files at most, 0.1–0.5 s each); the margin is
	// for a loaded machine. A slow refill (Trickle.Shape) brings each file
	// back 2–5.4 s after the one before, so that the whole takes longer. Setting it to 0 (mark at the first answer that
	// lacks an intent, as before the rule) is the deliberate bug I7 catches.
	registrySettle = 6 * time.Second
	// growthSeen: a file back this long before a mark may not have been in
	// the answer the mark followed (two sync intervals), so I7 does not
	// count it as growth the configurator saw.
	growthSeen = 2 * registrySync
	// confirmWithin: a confirmed held deletion has its intents marked this
	// long after the confirmation was stored, at most. The configurator
	// watches for confirmations and syncs at once; the margin is for a
	// loaded machine and a fault on the configurator at the same time.
	confirmWithin = 20 * time.Second
	// holdPoll: how often the registry-hold fault reads the registry's
	// status while its files are out.
	holdPoll = 250 * time.Millisecond
)

// regName is the i-th registry intent's name (reg-1 …).
func regName(i int) string { return fmt.Sprintf("reg-%d", i+1) }

// regFile is the file declaring the i-th registry intent.
func regFile(i int) string { return regName(i) + ".yaml" }

// regIntent is the i-th registry intent: a routing table on no node (no
// node has the label), so the registry changes no node's config.
func regIntent(i int) *sluicev1.Intent {
	return &sluicev1.Intent{Name: regName(i), Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{
		TableId: uint32(60 + i), NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"chaos": "never"}}}}}
}

// regKey is the intents-bucket key of the i-th registry intent.
func regKey(i int) string { return intent.Key(regIntent(i)) }

// droppedKeys names the registry's files drop: their intents' keys in the
// order given, and their ids as a RegistryStatus names them (kind/name,
// sorted).
func droppedKeys(drop []int) (keys, ids []string) {
	for _, i := range drop {
		keys = append(keys, regKey(i))
		ids = append(ids, strings.Replace(regKey(i), ".", "/", 1))
	}
	slices.Sort(ids)
	return keys, ids
}

// dropReg takes the registry's intent i out of its answers (its file
// moved away, its key deleted), reporting a failure as the harness's for
// fault ft.
func (s *system) dropReg(ft Fault, i int) bool {
	if err := s.reg.store.drop(i); err != nil {
		s.harnessFailed(harnessErr("%s: drop %s: %w", ft.Kind, regName(i), err))
		return false
	}
	return true
}

// backReg puts the registry's intent i back (its file, its key), reporting
// a failure as the harness's for fault ft.
func (s *system) backReg(ft Fault, i int) bool {
	if err := s.reg.store.back(i); err != nil {
		s.harnessFailed(harnessErr("%s: bring back %s: %w", ft.Kind, regName(i), err))
		return false
	}
	return true
}

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func regDoc(i int) []byte {
	return fmt.Appendf(nil, "kind: RoutingTable\nname: %s\nspec:\n  tableId: %d\n  nodeSelector:\n    matchLabels:\n      chaos: never\n",
		regName(i), 60+i)
}

// maxRegIntents is the most intents a registry plan declares (Pick).
const maxRegIntents = 5

// registry is the harness's side of the scenario's registry: where the
// configurator reads it (a directory or a redis-server), and when each
// intent was absent.
type registry struct {
	store   regStore
	mu      sync.Mutex
	gone    map[string][]Span // intent key → when its file was absent, in order
	rewinds []RewindObs       // when a git registry's branch was rewound (registry-rewind)
	holds   []HoldObs         // the registry-hold faults, as they ran
	confs   []ConfirmObs      // the registry-confirm-pending faults, as they ran
}

// newRegistry makes the scenario's registry: a directory (polled on
// virtual time), a redis-server of its own (on real time), or a git
// repository.
func newRegistry(t testing.TB, plan *RegistryPlan, virtual bool) *registry {
	var st regStore
	switch {
	case plan.Redis && !virtual:
		st = newRedisStore(t)
	case plan.Git:
		st = newGitStore(t.TempDir())
	default:
		st = newDirStore(t.TempDir(), virtual)
	}
	return &registry{store: st, gone: map[string][]Span{}}
}

// absent records that intent i's file is gone from the directory as of
// from (taken before the change, so that no answer lacking it predates it).
func (r *registry) absent(i int, from time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone[regKey(i)] = append(r.gone[regKey(i)], Span{From: from})
}

// back records that intent i's file is back as of to (taken after the
// change: no answer after it lacks the file).
func (r *registry) back(i int, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sp := r.gone[regKey(i)]; len(sp) > 0 && sp[len(sp)-1].To.IsZero() {
		sp[len(sp)-1].To = to
	}
}

// observed is what the checker gets: the registry, its settle period, its
// intents and their absences.
func (r *registry) observed(n int) *RegistryObs {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := &RegistryObs{Name: registryName, Settle: registrySettle, Absent: map[string][]Span{}}
	for i := range n {
		o.Intents = append(o.Intents, regKey(i))
		o.Absent[regKey(i)] = slices.Clone(r.gone[regKey(i)])
	}
	o.Holds = slices.Clone(r.holds)
	o.Confirms = slices.Clone(r.confs)
	o.Rewinds = slices.Clone(r.rewinds)
	return o
}

// held records a registry-hold fault as it ran.
func (r *registry) held(h HoldObs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
}

// writeFile puts a file in place atomically: written under a name the
// registry does not read, then renamed, so that no answer sees it half
// written (an empty file would be a partial answer the harness did not
// record).
func writeFile(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// declareRegistry writes the registry's intents (files or keys), declares
// it as `sluice registry add gitops --dir DIR --sync-interval 1s` (or
// `--redis URL`) does, and waits until the configurator stored each of
// its intents (owned by the registry).
func (d *driver) declareRegistry(ctx context.Context) error {
	s, plan := d.sys, d.sys.sc.Registry
	if err := s.reg.store.fill(plan.Intents); err != nil {
		return harnessErr("registry %s: %w", s.reg.store.kind(), err)
	}
	spec := &sluicev1.RegistrySpec{Name: registryName, SyncInterval: durationpb.New(registrySync), By: "chaos", At: timestamppb.Now()}
	s.reg.store.source(spec)
	err := retry(ctx, func(ctx context.Context) error {
		specs := store.New(s.Env().Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
		_, err := specs.Create(ctx, contract.RegistryKey(registryName), spec)
		if errors.Is(err, store.ErrConflict) {
			return nil // an earlier attempt landed
		}
		return err
	})
	if err != nil {
		return harnessErr("declare registry %s: %w", registryName, err)
	}
	s.log.add("registry %s declared: %d intents in %s, sync every %s, settle period %s", registryName, plan.Intents, s.reg.store, registrySync, registrySettle)
	wctx, cancel := context.WithTimeout(ctx, acceptWithin+readPatience)
	defer cancel()
	missing, err := await(wctx, acceptWithin, 1, func(ctx context.Context) ([]string, error) {
		var missing []string
		for i := range plan.Intents {
			in, err := readProto(ctx, s, s.Env().Buckets.Intents, regKey(i), &sluicev1.StoredIntent{})
			if unread(err) {
				return nil, err
			}
			if err != nil || in.GetSource() != registryName || in.GetMarkedForDeletion() {
				missing = append(missing, regKey(i))
			}
		}
		return missing, nil
	})
	switch {
	case err != nil:
		return harnessErr("could not tell whether registry %s synced: %w", registryName, err)
	case len(missing) > 0:
		return fmt.Errorf("registry %s: the configurator did not store %v within %s", registryName, missing, acceptWithin)
	}
	s.log.add("registry %s synced: its %d intents are stored", registryName, plan.Intents)
	return nil
}

// partialRegistry makes the registry's answers partial: it drops intents
// (some, all, or the whole registry: its directory, its server), then
// brings them back one at a time (a rename, a SET: atomic), a flapping
// one leaving again once, recording when each intent was absent.
func (f *faults) partialRegistry(ctx context.Context, ft Fault) {
	s, t := f.sys, ft.Trickle
	defer f.lock("registry")()
	dropped := slices.Compact(slices.Sorted(slices.Values(t.Back))) // a flapping file is listed twice
	if t.Drop == "gone" {
		from := time.Now()
		if err := s.reg.store.vanish(); err != nil {
			s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
			return
		}
		for _, i := range dropped {
			s.reg.absent(i, from)
		}
		s.log.add("%s: the registry (%s) is gone", ft, s.reg.store.kind())
	} else {
		for _, i := range dropped {
			from := time.Now()
			if !s.dropReg(ft, i) {
				return
			}
			s.reg.absent(i, from)
		}
		s.log.add("%s: dropped %d of %d intents", ft, len(dropped), s.sc.Registry.Intents)
	}
	for k, i := range t.Back {
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.Gaps[k]):
		}
		if t.Drop == "gone" && k == 0 {
			// The registry comes back empty, then fills up: a checkout
			// being made again, a Redis restarted without its data.
			if err := s.reg.store.reappear(); err != nil {
				s.harnessFailed(harnessErr("%s: %w", ft.Kind, err))
				return
			}
		}
		if !s.backReg(ft, i) {
			return
		}
		s.reg.back(i, time.Now())
		s.log.add("%s: %s is back (%d of %d)", ft.Kind, regName(i), k+1, len(t.Back))
		if j := t.leavesAgain(k); j >= 0 {
			// The intent that came back before this one leaves again (a flap).
			f, from := t.Back[j], time.Now()
			if !s.dropReg(ft, f) {
				return
			}
			s.reg.absent(f, from)
			s.log.add("%s: %s leaves again", ft.Kind, regName(f))
		}
	}
	// A file out longer than the settle period was marked, and its return
	// cuts a revision at the registry's next sync.
	f.awaitRestored(ctx, ft, time.Now())
}

// registryHold drops more of the registry's files than its hold share lets
// be pending, all at once, and keeps them out for ft.Hold.For (longer than
// the settle period), reading the registry's status meanwhile: it must
// hold their deletion (RegistryStatus.Held naming exactly them). If the
// fault confirms, it then stores the confirmation `sluice registry confirm`
// stores (the held deletion's digest, in sluice-control/registry.<name>.confirm)
// and waits until the configurator marked those intents for deletion, up to
// confirmWithin; then it brings the files back (a checkout restored).
// What it saw, and when, goes to the checker (HoldObs; Hold).
func (f *faults) registryHold(ctx context.Context, ft Fault) {
	s, h := f.sys, ft.Hold
	defer f.lock("registry")()
	obs := HoldObs{Owned: s.sc.Registry.Intents}
	var ids []string // as the status names them
	obs.Intents, ids = droppedKeys(h.Drop)
	defer func() { s.reg.held(obs) }()
	obs.From = time.Now()
	for _, i := range h.Drop {
		if !s.dropReg(ft, i) {
			return
		}
		s.reg.absent(i, obs.From)
	}
	s.log.add("%s: dropped %d of %d intents", ft, len(h.Drop), s.sc.Registry.Intents)
	sleep := func(d time.Duration) bool { return sleepCtx(ctx, d) }
	statuses := s.Env().Buckets.Registries
	var digest string
	for until := obs.From.Add(h.For); time.Now().Before(until); {
		rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		st, err := readProto(rctx, s, statuses, registryName, &sluicev1.RegistryStatus{})
		cancel()
		switch {
		case err == nil && slices.Equal(st.GetHeld().GetIntents(), ids):
			if obs.Held.IsZero() {
				obs.Held, obs.Seen = time.Now(), ""
				s.log.add("%s: the registry holds their deletion (digest %s): %s", ft.Kind, st.GetHeld().GetDigest(), st.GetHeld().GetReason())
			}
			digest = st.GetHeld().GetDigest()
		case err == nil && obs.Held.IsZero():
			obs.Seen = fmt.Sprintf("state %s, held %v, %d pending", st.GetState(), st.GetHeld().GetIntents(), len(st.GetPending()))
		case err != nil && obs.Held.IsZero():
			obs.Seen = err.Error() // a read that failed, or garbage: the next one may read
		}
		if !sleep(holdPoll) {
			return
		}
	}
	if obs.Held.IsZero() {
		s.log.add("%s: the registry's status never held their deletion (last read: %s)", ft.Kind, obs.Seen)
	}
	if h.Confirm && digest != "" {
		confirms := store.New(s.Env().Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
		req := &sluicev1.RegistryConfirm{Digest: digest, By: "chaos", At: timestamppb.Now(), Reason: "the chaos suite confirms the deletion it holds"}
		obs.Confirmed = time.Now()
		err := retry(ctx, func(ctx context.Context) error {
			_, err := confirms.Mutate(ctx, contract.RegistryConfirmKey(registryName), func(*sluicev1.RegistryConfirm) (*sluicev1.RegistryConfirm, error) { return req, nil })
			return err
		})
		if err != nil {
			s.harnessFailed(harnessErr("%s: confirm the held deletion %s: %w", ft.Kind, digest, err))
			obs.Confirmed = time.Time{}
		} else {
			s.log.add("%s: confirmed the held deletion %s (as sluice registry confirm %s)", ft.Kind, digest, registryName)
			f.awaitMarked(ctx, ft, obs.Intents)
		}
	}
	obs.Back = time.Now()
	for _, i := range h.Drop {
		if !s.backReg(ft, i) {
			return
		}
		s.reg.back(i, time.Now())
	}
	s.log.add("%s: the %d intents are back", ft.Kind, len(h.Drop))
	if !obs.Confirmed.IsZero() {
		f.awaitRestored(ctx, ft, obs.Back)
	}
}

// awaitRestored waits, after a registry fault's files came back (a
// confirmed hold's, or a partial answer's), until the
// registry synced them again (its status written after back, none of its
// intents marked) and the rollout of the head that sync cut ended: the
// marks and their undoing each cut a revision, and the last one's rollout
// must not begin after the harness took the system to be at rest (chaos
// seed 95 ended so once, its rollout observed Progressing). What it could
// not see is logged; the checker judges what is left as for any seed.
func (f *faults) awaitRestored(ctx context.Context, ft Fault, back time.Time) {
	s := f.sys
	wctx, cancel := context.WithTimeout(ctx, acceptWithin+readPatience)
	defer cancel()
	busy, err := await(wctx, acceptWithin, 1, func(ctx context.Context) ([]string, error) {
		st, err := readProto(ctx, s, s.Env().Buckets.Registries, registryName, &sluicev1.RegistryStatus{})
		if unread(err) {
			return nil, err
		}
		switch {
		case err != nil:
			return []string{"no readable status"}, nil
		case st.GetLastSync() == nil || st.GetLastSync().AsTime().Before(back):
			return []string{"no sync since the files came back"}, nil
		case st.GetMarked() > 0:
			return []string{fmt.Sprintf("%d intents still marked", st.GetMarked())}, nil
		}
		return nil, nil
	})
	if err != nil || len(busy) > 0 {
		s.log.add("%s: could not see the registry synced again (%v %v)", ft.Kind, busy, err)
		return
	}
	var head *sluicev1.Head
	err = retry(wctx, func(ctx context.Context) (err error) {
		head, err = readProto(ctx, s, s.Env().Buckets.Revisions, contract.KeyHead, &sluicev1.Head{})
		return err
	})
	if err != nil {
		s.log.add("%s: could not read the head after the registry synced again: %v", ft.Kind, err)
		return
	}
	id := contract.RolloutID(head.GetGeneration(), head.GetRevision())
	ok, err := s.waitPhase(ctx, id, endWithin, ended)
	if err != nil || !ok {
		s.log.add("%s: rollout %s of the registry's restored intents did not end within %s (%v)", ft.Kind, id, endWithin, err)
		return
	}
	s.log.add("%s: the registry synced its intents again; rollout %s ended", ft.Kind, id)
}

// awaitMarked waits until every intent of keys is marked for deletion in
// the intents bucket, up to confirmWithin, logs what it found and says
// whether they all were; the checker judges the marks from the bucket's
// writes (Hold, ConfirmPending).
func (f *faults) awaitMarked(ctx context.Context, ft Fault, keys []string) bool {
	s := f.sys
	wctx, cancel := context.WithTimeout(ctx, confirmWithin+readPatience)
	defer cancel()
	unmarked, err := await(wctx, confirmWithin, 1, func(ctx context.Context) ([]string, error) {
		var out []string
		for _, key := range keys {
			in, err := readProto(ctx, s, s.Env().Buckets.Intents, key, &sluicev1.StoredIntent{})
			if unread(err) {
				return nil, err
			}
			if err != nil || !in.GetMarkedForDeletion() {
				out = append(out, key)
			}
		}
		return out, nil
	})
	switch {
	case err != nil:
		s.log.add("%s: could not tell whether the confirmed intents are marked: %v", ft.Kind, err)
	case len(unmarked) > 0:
		s.log.add("%s: %v not marked for deletion %s after the confirmation", ft.Kind, unmarked, confirmWithin)
	default:
		s.log.add("%s: the confirmed intents are marked for deletion", ft.Kind)
		return true
	}
	return false
}

// ConfirmObs is one registry-confirm-pending fault as the harness drove
// it: its files out from From to Back, no more than the hold share lets be
// pending, and the confirmation of their pending set it stored.
type ConfirmObs struct {
	Intents []string // the intents whose files it dropped (intents-bucket keys)
	From    time.Time
	// Confirmed is taken before the harness stored the confirmation of
	// the pending set (sluice registry confirm), Digest the status's
	// pending digest it named; zero: it stored none (Seen says what it
	// read last).
	Confirmed time.Time
	Digest    string
	Seen      string
	// Settles is the earliest effective_at the status gave the confirmed
	// intents: when their settle period would have marked them anyway.
	Settles time.Time
	Back    time.Time // taken before the first file came back
}

// confirmed records a registry-confirm-pending fault as it ran.
func (r *registry) confirmed(c ConfirmObs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.confs = append(r.confs, c)
}

// confirmPending drops ft.Pending.Drop (a pending deletion: no more than
// the hold share), reads the registry's status until its pending set
// names exactly those intents, and stores the confirmation `sluice
// registry confirm` stores for a pending set (the status's pending
// digest, in sluice-control/registry.<name>.confirm), if their settle
// period is not about to run out anyway (half of it left at least). It
// waits until they are marked, up to confirmWithin; then it drops another
// file (Then, not in the confirmed set: the stored confirmation names a
// set it is not in) for For, less than the settle period, and brings every
// file back. What it saw goes to the checker (ConfirmObs; ConfirmPending,
// I7).
func (f *faults) confirmPending(ctx context.Context, ft Fault) {
	s, p := f.sys, ft.Pending
	defer f.lock("registry")()
	var obs ConfirmObs
	var ids []string // as the status names them
	obs.Intents, ids = droppedKeys(p.Drop)
	defer func() { s.reg.confirmed(obs) }()
	sleep := func(d time.Duration) bool { return sleepCtx(ctx, d) }
	obs.From = time.Now()
	for _, i := range p.Drop {
		if !s.dropReg(ft, i) {
			return
		}
		s.reg.absent(i, obs.From)
	}
	s.log.add("%s: dropped %d of %d intents", ft, len(p.Drop), s.sc.Registry.Intents)
	// The pending set, as sluice registry confirm reads it.
	for until := obs.From.Add(registrySettle / 2); time.Now().Before(until); {
		rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		st, err := readProto(rctx, s, s.Env().Buckets.Registries, registryName, &sluicev1.RegistryStatus{})
		cancel()
		if err != nil {
			obs.Seen = err.Error() // a read that failed, or garbage: the next one may read
		} else {
			var pending []string
			var settles time.Time
			for _, pd := range st.GetPending() {
				pending = append(pending, pd.GetIntent())
				if e := pd.GetEffectiveAt().AsTime(); settles.IsZero() || e.Before(settles) {
					settles = e
				}
			}
			slices.Sort(pending)
			obs.Seen = fmt.Sprintf("state %s, held %v, pending %v", st.GetState(), st.GetHeld().GetIntents(), pending)
			// Half the settle period left at least: a confirmation stored
			// later may race the period's own mark.
			if slices.Equal(pending, ids) && st.GetPendingDigest() != "" && time.Now().Add(registrySettle/2).Before(settles) {
				obs.Digest, obs.Settles = st.GetPendingDigest(), settles
				break
			}
		}
		if !sleep(holdPoll) {
			return
		}
	}
	if obs.Digest == "" {
		s.log.add("%s: the registry's status never named exactly their pending deletion early enough (last read: %s): not confirmed", ft.Kind, obs.Seen)
	} else {
		confirms := store.New(s.Env().Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
		req := &sluicev1.RegistryConfirm{Digest: obs.Digest, By: "chaos", At: timestamppb.Now(), Reason: "the chaos suite confirms the pending deletion"}
		obs.Confirmed = time.Now()
		err := retry(ctx, func(ctx context.Context) error {
			_, err := confirms.Mutate(ctx, contract.RegistryConfirmKey(registryName), func(*sluicev1.RegistryConfirm) (*sluicev1.RegistryConfirm, error) { return req, nil })
			return err
		})
		if err != nil {
			s.harnessFailed(harnessErr("%s: confirm the pending deletion %s: %w", ft.Kind, obs.Digest, err))
			obs.Confirmed = time.Time{}
		} else {
			s.log.add("%s: confirmed the pending deletion %s (as sluice registry confirm %s), due at %s", ft.Kind, obs.Digest, registryName,
				obs.Settles.Format("15:04:05.000"))
			if f.awaitMarked(ctx, ft, obs.Intents) {
				// A file not in the confirmed set, out less than the
				// settle period: the confirmation left stored names
				// another set, so it must not be marked (I7).
				from := time.Now()
				if !s.dropReg(ft, p.Then) {
					return
				}
				s.reg.absent(p.Then, from)
				s.log.add("%s: dropped %s, not in the confirmed set", ft.Kind, regName(p.Then))
				if !sleep(p.For) {
					return
				}
				if !s.backReg(ft, p.Then) {
					return
				}
				s.reg.back(p.Then, time.Now())
				s.log.add("%s: %s is back", ft.Kind, regName(p.Then))
			}
		}
	}
	obs.Back = time.Now()
	for _, i := range p.Drop {
		if !s.backReg(ft, i) {
			return
		}
		s.reg.back(i, time.Now())
	}
	s.log.add("%s: the %d intents are back", ft.Kind, len(p.Drop))
	f.awaitRestored(ctx, ft, obs.Back)
}

// confirmedPending says whether a mark of key at m follows a
// confirmation the harness stored of a pending set that named it, while
// its file was still out: the operator's word, not an answer, marked it.
func (r *RegistryObs) confirmedPending(key string, m time.Time) bool {
	return slices.ContainsFunc(r.Confirms, func(c ConfirmObs) bool {
		return !c.Confirmed.IsZero() && slices.Contains(c.Intents, key) && !m.Before(c.Confirmed) &&
			(c.Back.IsZero() || m.Before(c.Back))
	})
}

// ConfirmPending: an operator's confirmation of a registry's pending
// deletions (sluice registry confirm while they wait out their settle
// period, not held) marks them at once. For each confirmation the
// registry-confirm-pending fault stored: each confirmed intent was marked
// within confirmWithin of it, and the first of those marks came before
// their settle period would have marked them anyway (Settles), or the
// configurator said the pending deletion went ahead confirmed (a
// RegistryDeletionConfirmed event naming the digest: a configurator slowed
// past the period still marks them by the confirmation). What was not in
// the confirmed set I7 judges as any other absence. Not judged when
// garbage was written over the registry's spec, confirmation, status or
// intents.
func checkPendingConfirms(o *Observation, add addFunc) {
	reg := o.Registry
	if reg == nil || len(reg.Confirms) == 0 {
		return
	}
	for _, sp := range o.Spoiled {
		if (sp.Bucket == contract.BucketRegistries && sp.Key == reg.Name) ||
			(sp.Bucket == contract.BucketControl && (sp.Key == contract.RegistryKey(reg.Name) || sp.Key == contract.RegistryConfirmKey(reg.Name))) ||
			(sp.Bucket == contract.BucketIntents && slices.Contains(reg.Intents, sp.Key)) {
			return
		}
	}
	marks := intentMarks(o)
	clock := func(t time.Time) string { return t.Format("15:04:05.000") }
	for _, c := range reg.Confirms {
		if c.Confirmed.IsZero() || c.Back.IsZero() {
			continue // none stored, or the fault did not get to the end (said so)
		}
		said := slices.ContainsFunc(o.Events, func(ev *sluicev1.Event) bool {
			return ev.GetType() == "RegistryDeletionConfirmed" && strings.Contains(ev.GetReason(), "pending deletion "+c.Digest)
		})
		what := fmt.Sprintf("registry %s's answers dropped %s from %s, a pending deletion; the harness confirmed it (digest %s) at %s, its settle period due to end at %s",
			reg.Name, strings.Join(c.Intents, ", "), clock(c.From), c.Digest, clock(c.Confirmed), clock(c.Settles))
		for _, key := range c.Intents {
			i := slices.IndexFunc(marks[key], func(m time.Time) bool {
				return !m.Before(c.Confirmed) && m.Before(c.Confirmed.Add(confirmWithin+growthSeen))
			})
			switch {
			case i < 0:
				add("ConfirmPending", "", "", "%s; %s was not marked for deletion within %s of the confirmation", what, key, confirmWithin+growthSeen)
			case !marks[key][i].Before(c.Settles) && !said:
				add("ConfirmPending", "", "", "%s; %s was marked at %s, once its settle period ran out, and no RegistryDeletionConfirmed event says the confirmation marked it: a confirmed pending deletion is marked at once",
					what, key, clock(marks[key][i]))
			}
		}
	}
}
