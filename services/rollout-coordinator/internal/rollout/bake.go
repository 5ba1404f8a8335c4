package rollout

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The bake: the strategy's bake time between stages (and before the final
// gates), during which no node starts. It is the fleet's time on the
// stage's config, so its countdown is kept in the record and survives a
// term:
//
//   - running, the record's bakeUntil is when it is over; a new term
//     continues it (the nodes baked while no coordinator led, too);
//   - while a pause (the control plane's or the rollout's) holds the
//     rollout, the countdown stands still: the record's bakeLeft keeps the
//     time still to run, bakeUntil is unset, and at resume the bake runs
//     what was left (a new term that finds it held keeps it held, or
//     resumes it if the pause was lifted meanwhile);
//   - once over, the record's baked says so until the next stage starts
//     (it may wait for a window, a gate or a redundancy group), so a new
//     term does not bake again.
//
// Which nodes a bake covers after a takeover is pairs.go's to say.

// baking reports whether a bake holds the next stage: its time runs or a
// pause holds it.
func (s *State) baking() bool { return !s.bakeUntil.IsZero() || s.bakeLeft > 0 }

// startBake holds every node start for the strategy's bake time; before
// names what waits for it. Under a pause it starts held.
func (s *State) startBake(now time.Time, before string) {
	r := s.rollout
	s.bakeUntil, s.baked = now.Add(s.plan.Bake), false
	r.BakeUntil, r.Baked = timestamppb.New(s.bakeUntil), false
	s.changed()
	s.emit(s.rolloutEvent("RolloutBaking", fmt.Sprintf("%s finished; baking %s before %s", s.stageName(), s.plan.Bake, before)))
	s.syncBake(now)
}

// bakeTimeOver reports whether the bake's time, if one was started, has
// run: false while it runs or a pause holds it.
func (s *State) bakeTimeOver(now time.Time) bool {
	return s.bakeLeft == 0 && !s.bakeUntil.IsZero() && !now.Before(s.bakeUntil)
}

// passBake ends the bake whose time is over (and, for a stage's, whose
// re-runs passed): the next stage may start, and the members of
// redundancy groups it covered are proven.
func (s *State) passBake() {
	s.bakeUntil, s.baked = time.Time{}, true
	s.rollout.BakeUntil, s.rollout.Baked = nil, true
	s.changed()
	s.bakedNow()
}

// stageStartsBaked forgets the bake passed before the stage (or the
// redundancy group's node) that starts now: it counted for that one.
func (s *State) stageStartsBaked() {
	if s.baked {
		s.baked, s.rollout.Baked = false, false
		s.changed()
	}
}

// endBake forgets any bake: the rollout stopped (or ended), or is placed
// anew.
func (s *State) endBake() {
	s.bakeUntil, s.bakeLeft, s.baked = time.Time{}, 0, false
	if r := s.rollout; r != nil && (r.BakeUntil != nil || r.BakeLeft != nil || r.Baked) {
		r.BakeUntil, r.BakeLeft, r.Baked = nil, nil, false
		s.changed()
	}
}

// takeBake resumes the bake the record of a rollout resumed in a new term
// says (the package note on the bake). A bake whose time ran out while no
// coordinator led is over; its redundancy-group members stay unproven
// until the next bake (pairs.go: the term cannot tell which it covered).
func (s *State) takeBake(now time.Time) {
	r := s.rollout
	s.bakeUntil, s.bakeLeft, s.baked = time.Time{}, 0, r.GetBaked()
	switch {
	case r.GetBakeLeft() != nil:
		s.bakeLeft = max(r.GetBakeLeft().AsDuration(), time.Nanosecond)
		r.BakeUntil = nil
	case r.GetBakeUntil() == nil:
	case now.Before(r.GetBakeUntil().AsTime()):
		s.bakeUntil = r.GetBakeUntil().AsTime()
	default:
		s.baked = true
		r.BakeUntil, r.Baked = nil, true
	}
}

// bakeNote says, for RolloutResumed, where the bake a term resumed stands.
func (s *State) bakeNote(now time.Time) string {
	switch {
	case s.bakeLeft > 0:
		return fmt.Sprintf("; the bake is held with %s of %s left", bakeRound(s.bakeLeft), s.plan.Bake)
	case !s.bakeUntil.IsZero():
		return fmt.Sprintf("; the bake continues: %s of %s left", bakeRound(s.bakeUntil.Sub(now)), s.plan.Bake)
	}
	return ""
}

// bakeRound is d as a bake's time left is told: to the second, or to the
// millisecond under ten seconds (a sub-second bake's "0s of 146ms left"
// said nothing).
func bakeRound(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// syncBake stops the bake's countdown while a pause holds the rollout and
// restarts it, with the time that was left, once none does. It runs
// before every fill (settle) and wherever a bake starts.
func (s *State) syncBake(now time.Time) {
	r := s.rollout
	if r == nil {
		return
	}
	switch held := s.holding(); {
	case held && !s.bakeUntil.IsZero() && now.Before(s.bakeUntil):
		s.bakeLeft, s.bakeUntil = s.bakeUntil.Sub(now), time.Time{}
		r.BakeUntil, r.BakeLeft = nil, durationpb.New(s.bakeLeft)
		s.changed()
		s.emit(s.rolloutEvent("RolloutBakeHeld", fmt.Sprintf("paused: the bake stands with %s of %s left until resumed",
			s.bakeLeft.Round(time.Second), s.plan.Bake)))
	case !held && s.bakeLeft > 0:
		s.bakeUntil, s.bakeLeft = now.Add(s.bakeLeft), 0
		r.BakeUntil, r.BakeLeft = timestamppb.New(s.bakeUntil), nil
		s.changed()
		s.emit(s.rolloutEvent("RolloutBakeResumed", fmt.Sprintf("resumed: the bake runs the %s of %s left, until %s",
			s.bakeUntil.Sub(now).Round(time.Second), s.plan.Bake, s.bakeUntil.UTC().Format(time.RFC3339))))
	}
}
