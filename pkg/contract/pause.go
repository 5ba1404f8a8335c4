package contract

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The pause rules, defined once: what an instance acknowledges, and what
// nodes joining during a pause get. The protocol is drawn in
// docs/operations.md ("Pause").

// What nodes that join while the control plane is paused get (PauseRequest.joiners).
const (
	JoinersFreeze   = "freeze"    // nothing until resume (the default)
	JoinersLastGood = "last-good" // the last applied revision's config
)

// ValidJoiners reports whether p is a joiner policy ("" is the default, freeze).
func ValidJoiners(p string) error {
	switch p {
	case "", JoinersFreeze, JoinersLastGood:
		return nil
	}
	return fmt.Errorf("joiners %q: want %q (nothing until resume) or %q (the last applied revision)", p, JoinersFreeze, JoinersLastGood)
}

// JoinersGetLastGood reports whether nodes joining during pause p get the
// last applied revision (a nil or resumed pause holds nothing back).
func JoinersGetLastGood(p *sluicev1.PauseRequest) bool {
	return p.GetJoiners() == JoinersLastGood
}

// NextAck is the acknowledgement an instance that last acknowledged prev
// gives to request req: a resume is reached at once, a pause once busy is
// "" (nothing left to finish). While a pause is not reached yet the
// acknowledgement keeps the generation last reached and says what it waits
// for. It returns prev itself when nothing changed, so callers write only
// changes (and allocates nothing then: it runs on every coordinator step).
// A nil req (never paused) is generation 0, running. busy is read only
// when req pauses: a caller may pass "" otherwise.
func NextAck(prev *sluicev1.PauseAck, req *sluicev1.PauseRequest, busy string, now time.Time) *sluicev1.PauseAck {
	gen, paused, waiting := prev.GetGeneration(), prev.GetPaused(), ""
	switch {
	case req.GetGeneration() < prev.GetGeneration():
		return prev // an older request read late: what was reached stands
	case !req.GetPaused() || busy == "":
		gen, paused = req.GetGeneration(), req.GetPaused()
	default:
		waiting = busy
	}
	if gen == prev.GetGeneration() && paused == prev.GetPaused() &&
		waiting == prev.GetWaitingFor() && req.GetGeneration() == prev.GetSeen() {
		// Also nil for nil: an instance that has seen no request has
		// nothing to acknowledge, and a first ack of generation 0 would
		// cost every agent a presence write at its first apply.
		return prev
	}
	next := &sluicev1.PauseAck{Generation: gen, Paused: paused, At: prev.GetAt(), Seen: req.GetGeneration(), WaitingFor: waiting}
	if prev == nil || gen != prev.GetGeneration() || paused != prev.GetPaused() {
		next.At = timestamppb.New(now)
	}
	return next
}

// PauseReached reports whether ack has reached generation gen.
func PauseReached(ack *sluicev1.PauseAck, gen uint64) bool { return ack.GetGeneration() >= gen }

// DescribePause is a one-line account of req for logs, events and errors:
// "paused (generation 3) by ana@host at 10:04:05Z: maintenance window".
func DescribePause(req *sluicev1.PauseRequest) string {
	verb := "resumed"
	if req.GetPaused() {
		verb = "paused"
	}
	s := fmt.Sprintf("%s (generation %d)", verb, req.GetGeneration())
	if req.GetBy() != "" {
		s += " by " + req.GetBy()
	}
	if req.GetAt() != nil {
		s += " at " + req.GetAt().AsTime().UTC().Format(time.RFC3339)
	}
	if req.GetReason() != "" {
		s += ": " + req.GetReason()
	}
	return s
}
