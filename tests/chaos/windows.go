package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// ClosingPlan: change Change is applied with deploy windows of which the
// one open at the apply closes Close after it, and the other opens a
// minute later (docs/rollouts.md, "Deploy windows": a wave in flight when
// its window closes finishes; the next waits). Windows have minute
// granularity, so the harness waits before the apply until it falls Close
// before a minute boundary: up to a minute, and the minute the windows are
// closed, is what such a seed costs.
type ClosingPlan struct {
	Change int
	Close  time.Duration
}

func (c *ClosingPlan) String() string {
	return fmt.Sprintf("change %d: deploy windows, the open one closes %s after the apply, the next opens a minute later", c.Change, c.Close)
}

// onRealTime is sc as a run on real time takes it: without its closing
// window, which costs up to two minutes of wall time there (a wait for a
// minute boundary, then a closed minute) and nothing on virtual time,
// where every seed of `make chaos-virtual` and `make chaos-long` that
// draws one runs it. The draw itself stays, so no later draw moves.
func (sc Scenario) onRealTime() Scenario {
	if c := sc.Extras.Closing; c != nil {
		sc.Extras.Closing, sc.Extras.ClosingLeftOut = nil, c
	}
	return sc
}

// closingOdds: one seed in closingOdds draws a closing window.
const closingOdds = 16

// pickClosing picks a change with stages (waves or failure domains: only
// then is there a next wave to wait) that is applied after the one before
// it ended (a change applied while the one before still runs is applied
// when the schedule says, not at a minute's boundary). Nil if none is.
func (s Scenario) pickClosing(rng *rand.Rand) *ClosingPlan {
	var can []int
	for i := 1; i < len(s.Changes); i++ {
		c := s.Changes[i]
		if !c.Supersede && (c.Strategy.GetFirstWave() > 0 || c.Strategy.GetFailureDomain() != "") {
			can = append(can, i)
		}
	}
	if len(can) == 0 {
		return nil
	}
	return &ClosingPlan{Change: can[rng.IntN(len(can))], Close: ms(50 + rng.IntN(550))}
}

// closingWindows are the deploy windows of a change whose open window
// closes at c (a minute boundary): one from the hour before to c, and one
// from a minute after c for two hours, both UTC.
func closingWindows(c time.Time) []string {
	hm := func(t time.Time) string { return t.UTC().Format("15:04") }
	return []string{
		fmt.Sprintf("* %s-%s", hm(c.Add(-time.Hour)), hm(c)),
		fmt.Sprintf("* %s-%s UTC", hm(c.Add(time.Minute)), hm(c.Add(2*time.Hour))),
	}
}

// closeBoundary is the first minute boundary more than ahead after now.
func closeBoundary(now time.Time, ahead time.Duration) time.Time {
	return now.Add(ahead).Truncate(time.Minute).Add(time.Minute)
}

// untilClosing waits, before change i when the scenario closes its window,
// until the apply (and an in-place freeze written inPlaceLead before it)
// falls the plan's Close before a minute boundary, and keeps that boundary
// for decorate.
func (d *driver) untilClosing(ctx context.Context, i int) error {
	x := d.sys.sc.Extras
	c := x.Closing
	if c == nil || c.Change != i {
		return nil
	}
	ahead := c.Close
	if f := x.Freeze; f != nil && f.InPlace && f.Change == i {
		ahead += inPlaceLead
	}
	now := time.Now()
	at := closeBoundary(now, ahead)
	d.sys.closesAt = at
	wait := at.Add(-ahead).Sub(now)
	d.sys.log.add("change %d: waiting %s, so that its window closes %s after the apply (at %s) and the next opens at %s",
		i, wait.Round(time.Millisecond), c.Close, at.UTC().Format("15:04:05"), at.Add(time.Minute).UTC().Format("15:04:05"))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
	}
	return nil
}

// endWithin is how long the driver waits for change i's rollout to end:
// a minute more when its windows close while it runs, or when it was
// applied while such a rollout ran (queued behind it, whileActive queue,
// it starts only once that one ended: seeds 439 and 1201).
func (d *driver) endWithin(i int) time.Duration {
	c := d.sys.sc.Extras.Closing
	if c != nil && (c.Change == i || c.Change == i-1 && d.sys.sc.Changes[i].Supersede) {
		return endWithin + time.Minute
	}
	return endWithin
}
