package change

// The verbs besides Apply: Undo, Retry, and the stored intents after a
// journal lands (Landed), which every verb commits through.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Undo plans making set, an earlier revision's intents, the stored set
// again over live: every intent of set not stored as it is is written back
// (Writes, with its prior; Created and Updated say which), and every other
// live intent not marked already is marked for deletion (Mark, by key, and
// Marked, by id, in key order, each with its prior). Set is set, in
// canonical order.
func Undo(live map[string]Stored, unreadable map[string]uint64, set []*sluicev1.Intent) Batch {
	b := Apply(live, unreadable, set)
	b.Set = render.Sorted(set)
	keep := map[string]bool{}
	for _, in := range set {
		keep[intent.Key(in)] = true
	}
	for _, k := range slices.Sorted(maps.Keys(live)) {
		cur := live[k]
		if keep[k] || cur.Value.GetMarkedForDeletion() {
			continue
		}
		b.Mark = append(b.Mark, k)
		b.Marked = append(b.Marked, intent.ID(cur.Value.GetIntent()))
		b.Prior = append(b.Prior, &sluicev1.PriorIntent{Key: k, Value: cur.Value, KvRevision: cur.Revision})
	}
	return b
}

// Refused is a change the planner refuses: Why says what is wrong and what
// to do.
type Refused struct{ Why string }

func (r *Refused) Error() string { return r.Why }

// RetryPlan is how the head is rolled out again: with Strategy (RetryInvalid
// set, so the fingerprints its rollout recorded are forgiven on purpose),
// for Reason (the head's).
type RetryPlan struct {
	Strategy *sluicev1.Strategy
	Reason   string
}

// Retry plans rolling the head out again after its rollout (id) ended
// without succeeding: record is its record (nil when it exists but cannot
// be read: taken for ended, as the coordinator takes it; exists false when
// there is none). asked is the request's strategy (nil: the head's, head).
// A rollout not started, still running or succeeded is refused.
func Retry(id string, record *sluicev1.Rollout, exists bool, asked, head *sluicev1.Strategy) (RetryPlan, error) {
	phase := record.GetPhase()
	switch {
	case !exists:
		return RetryPlan{}, &Refused{Why: fmt.Sprintf("the head's rollout %s has not started yet: nothing to retry", id)}
	case contract.Active(phase):
		return RetryPlan{}, &Refused{Why: fmt.Sprintf("rollout %s is still running: wait for it, or stop it with sluice rollout abort", id)}
	case phase == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED:
		return RetryPlan{}, &Refused{Why: fmt.Sprintf("rollout %s succeeded: nothing to retry", id)}
	}
	st := asked
	if st == nil {
		st = head
	}
	st = proto.Clone(st).(*sluicev1.Strategy)
	if st == nil {
		st = &sluicev1.Strategy{}
	}
	st.RetryInvalid = true
	return RetryPlan{Strategy: st, Reason: fmt.Sprintf("retry of rollout %s, which ended %s: %s",
		id, strings.TrimPrefix(phase.String(), "ROLLOUT_PHASE_"), record.GetReason())}, nil
}

// Landed is the stored intents after journal j landed over live and
// unreadable, as the journal writes them: each of its intents stored, not
// marked, with its source and origin (an unreadable value it overwrites is
// readable after); each key it marks, marked (one gone already stays
// gone). A change planned from one read commits with it and needs no
// second read. The KV revisions of the keys written are not known here
// (0): Landed is for planning, never for a compare-and-set.
func Landed(live map[string]Stored, unreadable map[string]uint64, j *sluicev1.ApplyJournal) (map[string]Stored, map[string]uint64) {
	out, bad := maps.Clone(live), maps.Clone(unreadable)
	if out == nil {
		out = map[string]Stored{}
	}
	for _, in := range j.GetIntents() {
		k := intent.Key(in)
		delete(bad, k)
		out[k] = Stored{Key: k, Value: &sluicev1.StoredIntent{Intent: in, Source: j.GetSource(), Origin: j.GetOrigins()[k]}}
	}
	for _, k := range j.GetMark() {
		cur, ok := out[k]
		_, unread := bad[k]
		if !ok && !unread {
			continue
		}
		delete(bad, k)
		v := &sluicev1.StoredIntent{MarkedForDeletion: true}
		if ok {
			v = proto.Clone(cur.Value).(*sluicev1.StoredIntent)
			v.MarkedForDeletion = true
		}
		out[k] = Stored{Key: k, Value: v}
	}
	return out, bad
}
