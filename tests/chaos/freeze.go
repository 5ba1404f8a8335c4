package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// FreezePlan is an operator's freeze (sluice freeze add --from --to) the
// schedule adds: in place when change Change is applied (InPlace), or
// Delay after its apply, starting Lead after it is written (as --from in
// the near future), for Length.
type FreezePlan struct {
	Change  int
	InPlace bool
	Delay   time.Duration
	Lead    time.Duration
	Length  time.Duration
}

func (f *FreezePlan) String() string {
	if f.InPlace {
		return fmt.Sprintf("in place when change %d is applied, for %s", f.Change, f.Length)
	}
	return fmt.Sprintf("added %s after change %d was applied, from %s later, for %s", f.Delay, f.Change, f.Lead, f.Length)
}

// inPlaceLead: a freeze in place at apply is written this long before the
// change, so that the coordinator's watch of the control bucket has it
// before the head it holds: two watches, with no order between them. With
// 100 ms, seed 153 (R3, load 10) started its rollout inside the freeze: the
// coordinator had not heard of it yet (docs/chaos.md, Limits).
const inPlaceLead = 500 * time.Millisecond

func (s Scenario) pickFreeze(rng *rand.Rand) *FreezePlan {
	f := &FreezePlan{Change: 1 + rng.IntN(len(s.Changes)-1), InPlace: rng.IntN(2) == 0,
		Delay: ms(rng.IntN(600)), Lead: ms(300 + rng.IntN(200)), Length: ms(500 + rng.IntN(2500))}
	if f.InPlace {
		// It holds the whole rollout, not a wave between two: half as long
		// (0.5–1.75 s), to keep the suite's time (docs/chaos.md).
		f.Delay, f.Lead, f.Length = 0, 0, 500*time.Millisecond+(f.Length-500*time.Millisecond)/2
	}
	return f
}

// FreezeObs is a freeze the harness wrote.
type FreezeObs struct {
	Key      string
	From, To time.Time
}

// freezes records what the harness froze.
type freezes struct {
	mu  sync.Mutex
	all []FreezeObs
}

func (f *freezes) add(o FreezeObs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = append(f.all, o)
}

func (f *freezes) list() []FreezeObs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FreezeObs(nil), f.all...)
}

// addFreeze writes control/freeze.<id> as `sluice freeze add --from --to`
// does, from lead after now for length, and records it.
func (s *system) addFreeze(ctx context.Context, id string, lead, length time.Duration) error {
	from := time.Now().Add(lead)
	fr := &sluicev1.Freeze{Id: id, From: timestamppb.New(from), To: timestamppb.New(from.Add(length)),
		Reason: "chaos: core router maintenance", By: "chaos@harness", CreatedAt: timestamppb.Now()}
	key := contract.FreezeKey(id)
	err := retry(ctx, func(ctx context.Context) error {
		st := store.New(s.Env().Buckets.Control, func() *sluicev1.Freeze { return &sluicev1.Freeze{} })
		_, err := st.Mutate(ctx, key, func(*sluicev1.Freeze) (*sluicev1.Freeze, error) { return fr, nil })
		return err
	})
	if err != nil {
		return harnessErr("could not add freeze %s: %w", id, err)
	}
	s.frozen.add(FreezeObs{Key: key, From: from, To: from.Add(length)})
	s.log.add("freeze %s added: %s – %s", id, from.Format("15:04:05.000"), from.Add(length).Format("15:04:05.000"))
	return nil
}

// freezeBeforeApply adds the scenario's in-place freeze before change i.
func (d *driver) freezeBeforeApply(ctx context.Context, i int) error {
	f := d.sys.sc.Extras.Freeze
	if f == nil || !f.InPlace || f.Change != i {
		return nil
	}
	if err := d.sys.addFreeze(ctx, fmt.Sprintf("chaos-%d", i), 0, f.Length); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(inPlaceLead):
	}
	return nil
}

// freezeWhileRunning adds the scenario's freeze Delay after its change was
// applied (runAll runs it beside the faults).
func (f *faults) freezeWhileRunning(ctx context.Context) {
	fp := f.sys.sc.Extras.Freeze
	if fp == nil || fp.InPlace {
		return
	}
	a := f.drv.changes[fp.Change]
	select {
	case <-ctx.Done():
		return
	case <-a.done:
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(fp.Delay):
	}
	if err := f.sys.addFreeze(ctx, fmt.Sprintf("chaos-%d", fp.Change), fp.Lead, fp.Length); err != nil {
		f.sys.harnessFailed(err)
	}
}

// openWindows are deploy windows for a change applied at now: one open
// from the hour before to two hours after (so no seed sees it close), one
// closed (hours away), both UTC.
func openWindows(now time.Time) []string {
	h := now.UTC().Hour()
	return []string{
		fmt.Sprintf("* %02d:00-%02d:00", (h+5)%24, (h+6)%24),
		fmt.Sprintf("* %02d:00-%02d:00 UTC", (h+23)%24, (h+2)%24),
	}
}

// writeSlack: a rollout without waves or failure domains records no
// stage, so its start is judged by its first write's written_at, which a
// writer goroutine stamps when it makes the write, after the decision
// (taken on the same clock) and after whatever the writer had queued or
// had to read first (a key whose revision the term does not know yet is
// read before it is written). A write up to this much after a freeze
// began, or a window closed, may have been decided before. 50 ms was not
// enough at load 18 (real time): seed 23's first write was stamped 100 ms
// into a freeze written 390 ms before it began, and the seed passed alone
// and 24 times of 24 four at a time at load 14-19 (docs/findings.md). A
// coordinator that ignores freezes writes anywhere in them (seconds long),
// which mutation 17 is caught by.
const writeSlack = 250 * time.Millisecond

// waveStart is a moment rollout r started a wave, and how much earlier it
// may have been decided (slack).
type waveStart struct {
	at    time.Time
	slack time.Duration
	what  string
}

// rolloutStarts are the moments rollout r started a wave: each stage's
// start, or, with no stage recorded, its first forward write.
func rolloutStarts(o *Observation, r *sluicev1.Rollout) []waveStart {
	var starts []waveStart
	for i, st := range r.GetStages() {
		if st.GetStartedAt() != nil {
			starts = append(starts, waveStart{at: st.GetStartedAt().AsTime(), what: fmt.Sprintf("stage %d (wave %d, domain %q)", i+1, st.GetWave(), st.GetDomain())})
		}
	}
	if len(starts) > 0 {
		return starts
	}
	var first time.Time
	for _, w := range o.ConfigWrites {
		d := w.Desired
		if w.Delete || d == nil || d.GetRollout() != r.GetId() || d.GetRevert() || d.GetCancel() || d.GetWrittenAt() == nil {
			continue
		}
		if _, which, _ := contract.NodeOfConfigKey(w.Key); which != "desired" || d.GetFingerprint() != o.Targets[r.GetId()][d.GetNode()] {
			continue
		}
		if t := d.GetWrittenAt().AsTime(); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if !first.IsZero() {
		starts = append(starts, waveStart{at: first, slack: writeSlack, what: "its first write (no stage recorded)"})
	}
	return starts
}

// Freeze, Window: no wave (the first included) starts while a freeze is in
// force or outside the strategy's windows (docs/rollouts.md, "Deploy
// windows"): each stage's recorded start, on the coordinator's clock, is
// outside every freeze the harness wrote ([from, to), the same process's
// clock) and inside a window. A freeze whose key got garbage is not judged:
// the coordinator rightly skips a value it cannot read.
func checkFreezesAndWindows(o *Observation, add addFunc) {
	for _, r := range o.Rollouts {
		starts := rolloutStarts(o, r)
		for _, f := range o.Freezes {
			if spoiledKey(o, contract.BucketControl, f.Key) {
				continue
			}
			for _, st := range starts {
				if !st.at.Before(f.From.Add(st.slack)) && st.at.Before(f.To) {
					add("Freeze", r.GetId(), "", "%s started at %s, within %s (%s – %s)", st.what, st.at.Format("15:04:05.000"), f.Key,
						f.From.Format("15:04:05.000"), f.To.Format("15:04:05.000"))
				}
			}
		}
		var ws []contract.Window
		for _, text := range r.GetStrategy().GetWindows() {
			w, err := contract.ParseWindow(text)
			if err != nil {
				add("Window", r.GetId(), "", "its strategy's window %q does not parse: %v", text, err)
				continue
			}
			ws = append(ws, w)
		}
		if len(ws) == 0 {
			continue
		}
		for _, st := range starts {
			open, _ := contract.WindowsOpen(ws, st.at)
			decided, _ := contract.WindowsOpen(ws, st.at.Add(-st.slack))
			if !open && !decided {
				add("Window", r.GetId(), "", "%s started at %s, outside its windows %s", st.what, st.at.UTC().Format(time.RFC3339Nano),
					contract.DescribeWindows(ws))
			}
		}
	}
}
