package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Gates (docs/rollouts.md, "Gates"). The decision is here; the loop only
// measures. A metric gate is asked for once per boundary — after a stage's
// bake, before the next wave or failure domain starts, and before the
// rollout ends (contract.GateEnd) — with the WatchGates action; the loop
// queries Prometheus until the gate is no longer asked for and feeds each
// measurement back as GateMeasured. An alert gate is watched all the time
// the rollout goes forward. Missing data (no answer, too few samples)
// never passes or fails a gate: no node starts, the record says why, and
// the gate fails at its deadline.

// gateState is what the active rollout's gates have said.
type gateState struct {
	checks  []*gateCheck // the plan's gates, in its order
	asked   string       // the boundary the metric gates are asked for ("wave 3", contract.GateEnd); "" none
	askedAt time.Time    // when: the metric gates' deadlines count from it
	passed  string       // the boundary every metric gate passed for
	watched string       // the key of the last WatchGates: it is sent again only when it changes
	waiting bool         // the record's waiting line is a gate's
}

type gateCheck struct {
	gate    contract.Gate
	verdict string    // the last verdict at the boundary asked (metric) or now (alert); "" no answer yet
	since   time.Time // alert gate: when it last had no answer (its deadline counts from it)
	class   string    // why it last waited, coarse ("unreachable", "samples"): one event per change
}

// initGates sets the active rollout's gates up from its plan.
func (s *State) initGates(now time.Time) {
	// What the loop measures is kept: a rollout started as another ends
	// must stop that one's measurements (syncGates compares).
	s.gates = gateState{watched: s.gates.watched}
	for _, g := range s.plan.Gates {
		s.gates.checks = append(s.gates.checks, &gateCheck{gate: g, since: now})
	}
}

func (s *State) metricGates() bool {
	return slices.ContainsFunc(s.gates.checks, func(c *gateCheck) bool { return !c.gate.IsAlert() })
}

// metricGatesPass reports whether every metric gate passed at boundary
// before; the first call for a boundary asks for them.
func (s *State) metricGatesPass(now time.Time, before string) bool {
	g := &s.gates
	if !s.metricGates() || g.passed == before {
		return true
	}
	if g.asked != before {
		g.asked, g.askedAt = before, now
		var names []string
		for _, c := range g.checks {
			if !c.gate.IsAlert() {
				c.verdict, c.class = "", ""
				names = append(names, c.gate.Name)
			}
		}
		s.gateWait(fmt.Sprintf("%s%s before %s: checking", contract.GateWaitPrefix, strings.Join(names, ", "), before), now.Add(s.gateDeadline()))
		s.emit(s.rolloutEvent("RolloutCheckingGates", fmt.Sprintf("checking gate %s before %s", strings.Join(names, ", "), before)))
		return false
	}
	for _, c := range g.checks {
		if !c.gate.IsAlert() && c.verdict != contract.GatePassed {
			return false
		}
	}
	g.passed, g.asked = before, ""
	s.gateWaitOver()
	s.emit(s.rolloutEvent("RolloutGatesPassed", fmt.Sprintf("every gate passed before %s", before)))
	return true
}

// forgetGateAnswers drops what the metric gates said at the boundary in
// progress: they are asked afresh.
func (s *State) forgetGateAnswers() {
	s.gates.asked, s.gates.passed = "", ""
}

// gateDeadline is the longest deadline of the metric gates.
func (s *State) gateDeadline() time.Duration {
	var d time.Duration
	for _, c := range s.gates.checks {
		if !c.gate.IsAlert() {
			d = max(d, c.gate.Deadline)
		}
	}
	return d
}

// alertsClear reports whether every alert gate answered that none of its
// alerts fires; until one has, no node starts.
func (s *State) alertsClear(now time.Time) bool {
	for _, c := range s.gates.checks {
		if !c.gate.IsAlert() || c.verdict == contract.GateClear {
			continue
		}
		if c.verdict == "" && !s.gates.waiting {
			s.gateWait(contract.GateWaitPrefix+c.gate.Name+": reading the alerts", c.since.Add(c.gate.Deadline))
		}
		return false
	}
	return true
}

// endGates reports whether the gates let the rollout end: after a bake (the
// last stage's effect shows in the metrics only then), every metric gate
// passes before the end and no alert fires. A rollout that started no node
// changed nothing to check.
func (s *State) endGates(now time.Time) bool {
	if len(s.gates.checks) == 0 || s.started == 0 {
		return true
	}
	if s.metricGates() && s.plan.Bake > 0 && !s.baked && s.gates.passed != contract.GateEnd {
		if !s.baking() {
			s.startBake(now, "the final gates")
			return false
		}
		if !s.bakeTimeOver(now) {
			return false
		}
		s.passBake()
	}
	return s.alertsClear(now) && s.metricGatesPass(now, contract.GateEnd)
}

// gateWait says in the record what the rollout waits for, until when.
func (s *State) gateWait(why string, until time.Time) {
	r := s.rollout
	if r.GetWaiting() == why && r.GetWaitingUntil().AsTime().Equal(until) {
		return
	}
	s.gates.waiting = true
	r.Waiting, r.WaitingUntil = why, timestamppb.New(until)
	s.changed()
}

// gateWaitOver clears the record's waiting line if a gate set it.
func (s *State) gateWaitOver() {
	if !s.gates.waiting {
		return
	}
	s.gates.waiting = false
	s.rollout.Waiting, s.rollout.WaitingUntil = "", nil
	s.changed()
}

// gateMeasured judges what the loop measured for a gate.
func (s *State) gateMeasured(ev GateMeasured, now time.Time) {
	r := s.rollout
	if r == nil || ev.Rollout != r.GetId() || s.reverting || s.stopReason != "" {
		return // a measurement for a rollout that ended or stopped
	}
	i := slices.IndexFunc(s.gates.checks, func(c *gateCheck) bool { return c.gate.Name == ev.Gate })
	if i < 0 {
		return
	}
	c := s.gates.checks[i]
	if !c.gate.IsAlert() && (ev.Before != s.gates.asked || c.verdict == contract.GatePassed) {
		return // asked for an earlier boundary, or decided already
	}
	res, class := judge(c.gate, ev)
	res.Before = ev.Before
	if c.gate.IsAlert() {
		res.Before = ""
	}
	res.At = timestamppb.New(now)
	prev := c.verdict
	c.verdict = res.GetVerdict()
	s.keepResult(res)
	switch c.verdict {
	case contract.GateFailed, contract.GateFiring:
		s.gateFailed(c, res, now)
	case contract.GateWaiting:
		if prev != contract.GateWaiting || class != c.class {
			c.class = class
			if c.gate.IsAlert() && prev != contract.GateWaiting && prev != "" {
				c.since = now
			}
			s.emit(s.gateEvent(c, "GateWaiting", fmt.Sprintf("%s; no node starts until it answers; it fails at %s",
				res.GetMessage(), s.gateGivesUp(c).UTC().Format(time.RFC3339))))
		}
		s.gateWait(contract.GateWaitPrefix+res.GetMessage(), s.gateGivesUp(c))
	case contract.GatePassed:
		c.class = ""
		s.emit(s.gateEvent(c, "GatePassed", res.GetMessage()))
	case contract.GateClear:
		c.class = ""
		if prev != contract.GateClear {
			s.gateWaitOver()
			s.emit(s.gateEvent(c, "GateClear", res.GetMessage()))
		}
	}
}

// gateGivesUp is when gate c fails for want of data.
func (s *State) gateGivesUp(c *gateCheck) time.Time {
	if c.gate.IsAlert() {
		return c.since.Add(c.gate.Deadline)
	}
	return s.gates.askedAt.Add(c.gate.Deadline)
}

// gateDeadlines fails a gate that has waited for data past its deadline.
func (s *State) gateDeadlines(now time.Time) {
	if s.rollout == nil || s.reverting || s.stopReason != "" {
		return
	}
	for _, c := range s.gates.checks {
		switch {
		case c.gate.IsAlert() && c.verdict == contract.GateClear:
			continue
		case !c.gate.IsAlert() && (s.gates.asked == "" || c.verdict == contract.GatePassed):
			continue
		}
		if now.Before(s.gateGivesUp(c)) {
			continue
		}
		last := s.resultOf(c.gate.Name)
		why := "no answer"
		if last != nil && last.GetVerdict() == contract.GateWaiting {
			why = last.GetMessage()
		}
		res := &sluicev1.GateResult{Gate: c.gate.Name, Before: s.gates.asked, Verdict: contract.GateFailed, Query: c.gate.Query,
			At: timestamppb.New(now), Samples: last.GetSamples(),
			Message: fmt.Sprintf("%s: gave up after waiting %s for data (%s)", c.gate.Name, c.gate.Deadline, why)}
		if c.gate.IsAlert() {
			res.Before = "" // no value was measured: no comparison to show
		}
		c.verdict = contract.GateFailed
		s.keepResult(res)
		s.gateFailed(c, res, now)
		return
	}
}

// gateFailed stops the rollout and reverts it, naming the gate as the cause.
func (s *State) gateFailed(c *gateCheck, res *sluicev1.GateResult, now time.Time) {
	r := s.rollout
	r.BlockedBy = proto.Clone(res).(*sluicev1.GateResult)
	s.gateWaitOver()
	s.emit(s.gateEvent(c, "GateFailed", res.GetMessage()))
	s.startRevert(now, "blocked by gate "+res.GetMessage())
}

// keepResult puts res in the record's gate results, by gate name.
func (s *State) keepResult(res *sluicev1.GateResult) {
	r := s.rollout
	i := slices.IndexFunc(r.Gates, func(g *sluicev1.GateResult) bool { return g.GetGate() == res.GetGate() })
	if i < 0 {
		r.Gates = append(r.Gates, res)
	} else if proto.Equal(r.Gates[i], res) {
		return
	} else {
		r.Gates[i] = res
	}
	s.changed()
}

func (s *State) resultOf(gate string) *sluicev1.GateResult {
	for _, g := range s.rollout.GetGates() {
		if g.GetGate() == gate {
			return g
		}
	}
	return nil
}

func (s *State) gateEvent(c *gateCheck, typ, reason string) *sluicev1.Event {
	r := s.rollout
	return &sluicev1.Event{Kind: contract.KindGate, Id: contract.GateEventID(r.GetId(), c.gate.Name), Type: typ, Reason: reason,
		Rollout: r.GetId(), Revision: r.GetRevision(), Gate: c.gate.Name}
}

// syncGates asks the loop for the gate measurements the state needs now:
// the alert gates while the rollout goes forward, the metric gates while a
// boundary waits for them. The action is sent only when that set changes.
func (s *State) syncGates() {
	var checks []GateCheck
	if r := s.rollout; r != nil && !s.reverting && s.stopReason == "" {
		for _, c := range s.gates.checks {
			switch {
			case c.gate.IsAlert():
				checks = append(checks, GateCheck{Gate: c.gate})
			case s.gates.asked != "" && c.verdict != contract.GatePassed:
				checks = append(checks, GateCheck{Gate: c.gate, Before: s.gates.asked})
			}
		}
	}
	var key strings.Builder
	if len(checks) > 0 {
		key.WriteString(s.rollout.GetId())
	}
	for _, c := range checks {
		fmt.Fprintf(&key, "|%s@%s", c.Gate.Name, c.Before)
	}
	if key.String() == s.gates.watched {
		return
	}
	s.gates.watched = key.String()
	s.do(WatchGates{Rollout: s.rollout.GetId(), Checks: checks})
}

// threshold is what a metric gate's values must be: "<=" max, or ">=" min
// when it has no max.
func threshold(g contract.Gate) (string, float64) {
	if g.Max != nil {
		return "<=", *g.Max
	}
	if g.Min != nil {
		return ">=", *g.Min
	}
	return "", 0
}

// judge turns a measurement into a result and, while it waits, the coarse
// reason (one event per change of it).
func judge(g contract.Gate, m GateMeasured) (*sluicev1.GateResult, string) {
	res := &sluicev1.GateResult{Gate: g.Name, Query: g.Query, Samples: uint32(max(m.Samples, 0))}
	if g.IsAlert() {
		switch {
		case m.Err != "":
			res.Verdict, res.Message = contract.GateWaiting, fmt.Sprintf("%s: cannot read the alerts: %s", g.Name, m.Err)
			return res, "unreachable"
		case len(m.Firing) > 0:
			res.Verdict, res.Firing = contract.GateFiring, slices.Clone(m.Firing)
			res.Message = fmt.Sprintf("%s: alert %s firing", g.Name, strings.Join(m.Firing, ", "))
		default:
			res.Verdict, res.Message = contract.GateClear, fmt.Sprintf("%s: none of %s firing", g.Name, strings.Join(g.Alerts, ", "))
		}
		return res, ""
	}
	res.Comparison, res.Threshold = threshold(g)
	switch {
	case m.Err != "":
		res.Verdict, res.Message = contract.GateWaiting, fmt.Sprintf("%s: Prometheus did not answer: %s", g.Name, m.Err)
		return res, "unreachable"
	case m.Samples < g.MinSamples:
		res.Verdict = contract.GateWaiting
		res.Message = fmt.Sprintf("%s: %d of %d samples over %s", g.Name, m.Samples, g.MinSamples, g.Lookback)
		return res, "samples"
	}
	// The worst value over the lookback decides, against each threshold.
	if g.Max != nil && m.Max > *g.Max {
		res.Verdict, res.Value, res.Comparison, res.Threshold = contract.GateFailed, m.Max, "<=", *g.Max
		res.Message = fmt.Sprintf("%s: %s > %s over %s", g.Name, contract.FormatValue(m.Max), contract.FormatValue(*g.Max), g.Lookback)
		return res, ""
	}
	if g.Min != nil && m.Min < *g.Min {
		res.Verdict, res.Value, res.Comparison, res.Threshold = contract.GateFailed, m.Min, ">=", *g.Min
		res.Message = fmt.Sprintf("%s: %s < %s over %s", g.Name, contract.FormatValue(m.Min), contract.FormatValue(*g.Min), g.Lookback)
		return res, ""
	}
	res.Verdict, res.Value = contract.GatePassed, m.Max
	if g.Max == nil {
		res.Value = m.Min
	}
	res.Message = fmt.Sprintf("%s: %s %s %s over %s (%d samples)", g.Name, contract.FormatValue(res.Value), res.Comparison,
		contract.FormatValue(res.Threshold), g.Lookback, m.Samples)
	return res, ""
}
