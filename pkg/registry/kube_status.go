// Status write-back of the Kubernetes registry: after each merged sync the
// configurator hands Report one Outcome per document, and each resource of
// a kind with a status (sluice's own; kubeKind.status) gets two conditions
// on its status subresource, with the revision that carries it:
//
//	Synced   True  Carried   revision <r> carries generation <g>
//	         False Refused   the configurator's field error (or conflict)
//	InForce  True  RolledOut  a revision at or after <r> is in force and
//	                          holds the resource as declared
//	         False RollingOut <r> is not in force yet
//	               Superseded a later revision is in force that does not
//	                          hold it as declared (sluice rollout undo went
//	                          back past <r>)
//	               Refused
//
// status.revision is the head revision that first carried the resource's
// current generation and status.headGeneration that head's generation: it
// is kept while the generation and the intent stay the same, so a head
// moved by another resource rewrites nothing here, and InForce turns True
// once the revision in force has a head generation at or past it
// (rollouts/last-applied) and holds the resource's intent as the resource
// declares it. The generation alone is not enough: an undo moves the head
// to an earlier revision's content as a new generation, so the revision in
// force after it is "later" and may not hold the resource at all.
//
// A write is made only when what Report decided differs from the status the
// same Fetch listed (kubeStatus, a pure decision): a sync with nothing new
// writes nothing, whatever the number of resources; a change writes once
// per resource it touches, and the watch event of that write makes one more
// sync that writes nothing. All of one Report's writes share the
// configurator's fetch timeout (what is left unwritten is written by a
// later sync, the decision being made again against what the resource
// says). A write that fails never fails the sync: Report
// logs when the failure's text changes and the registry's note says it
// until a Report writes without error.
//
// das-schiff's kinds get nothing: their CRDs declare status as an object
// with no fields (and no x-kubernetes-preserve-unknown-fields), so the API
// server would prune every field written there; their outcome stays on the
// registry's status (sluice get registries).

package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Condition types and reasons written on a resource's status.
const (
	CondSynced  = "Synced"
	CondInForce = "InForce"

	ReasonCarried    = "Carried"
	ReasonRefused    = "Refused"
	ReasonRolledOut  = "RolledOut"
	ReasonRollingOut = "RollingOut"
	ReasonSuperseded = "Superseded"
)

// kubeStatusTimeout bounds one status write.
const kubeStatusTimeout = 10 * time.Second

// Revision is a head revision and the head's generation.
type Revision struct {
	ID         string
	Generation uint64
	// Intents are the revision's intents when the caller read them (the
	// revision in force, from which Outcome.InForceHolds is decided); nil
	// otherwise.
	Intents []*sluicev1.Intent
}

// Outcome is what one merged sync did with one document.
type Outcome struct {
	Origin string
	// Refused says why the document's intent is not in force as declared
	// (field errors, a conflict); "" when the head carries it.
	Refused string
	// Note is what was read but not carried (a field sluice has no
	// meaning for); the intent is carried.
	Note string
	// Head is the head once the sync landed; InForce the revision in force
	// (zero when none yet).
	Head, InForce Revision
	// InForceHolds: the revision in force holds every intent of the
	// document as the document declares it.
	InForceHolds bool
}

// Reporter is a Registry that writes outcomes back onto its documents.
type Reporter interface {
	// Report writes each outcome on its document when it differs from
	// what the document says; it returns how many it wrote and the first
	// failure. It never blocks longer than a write timeout per document.
	Report(ctx context.Context, outcomes []Outcome, now time.Time) (int, error)
}

// kubeSeen is what a Fetch listed of a resource with a status, for Report.
type kubeSeen struct {
	kind       kubeKind
	namespace  string
	name       string
	generation int64
	status     kubeStatusValue
}

// kubeStatusValue is the part of a resource's status sluice writes.
type kubeStatusValue struct {
	Conditions     []metav1.Condition `json:"conditions,omitempty"`
	Revision       string             `json:"revision,omitempty"`
	HeadGeneration uint64             `json:"headGeneration,omitempty"`
}

// seenOf reads obj's status (what sluice wrote before, if anything).
func seenOf(k kubeKind, obj *unstructured.Unstructured) kubeSeen {
	s := kubeSeen{kind: k, namespace: obj.GetNamespace(), name: obj.GetName(), generation: obj.GetGeneration()}
	if m, ok := obj.Object["status"].(map[string]any); ok {
		// A status sluice cannot read is one it rewrites: no error.
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(m, &s.status)
	}
	return s
}

// kubeStatus decides the status of a resource at generation gen from what
// it says (prev) and the sync's outcome o; changed is false when prev
// says it already. Pure: now is the transition time of a condition whose
// status changes.
func kubeStatus(prev kubeStatusValue, o Outcome, gen int64, now time.Time) (next kubeStatusValue, changed bool) {
	next = kubeStatusValue{Conditions: slices.Clone(prev.Conditions)}
	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		if meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg,
			ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}) {
			changed = true
		}
	}
	if o.Refused != "" {
		next.Revision, next.HeadGeneration = prev.Revision, prev.HeadGeneration
		set(CondSynced, false, ReasonRefused, o.Refused)
		set(CondInForce, false, ReasonRefused, "generation "+fmt.Sprint(gen)+" is refused; the last valid version stays in force")
		return next, changed
	}
	// The revision that first carried this generation stays named while
	// the generation is the same and it was carried.
	next.Revision, next.HeadGeneration = o.Head.ID, o.Head.Generation
	if c := meta.FindStatusCondition(prev.Conditions, CondSynced); c != nil && c.Status == metav1.ConditionTrue &&
		c.ObservedGeneration == gen && prev.Revision != "" && prev.HeadGeneration <= o.Head.Generation {
		next.Revision, next.HeadGeneration = prev.Revision, prev.HeadGeneration
	}
	msg := fmt.Sprintf("revision %s carries generation %d", render.Short(next.Revision), gen)
	if o.Note != "" {
		msg += "; " + o.Note
	}
	set(CondSynced, true, ReasonCarried, msg)
	switch later := o.InForce.ID != "" && o.InForce.Generation >= next.HeadGeneration; {
	case later && o.InForceHolds:
		set(CondInForce, true, ReasonRolledOut, fmt.Sprintf("revision %s, or a later one carrying it, is in force", render.Short(next.Revision)))
	case later:
		set(CondInForce, false, ReasonSuperseded, fmt.Sprintf("revision %s in force (generation %d) does not hold generation %d as declared: "+
			"an undo went back past revision %s; it is in force again once a revision holding it rolls out (sluice get rollouts)",
			render.Short(o.InForce.ID), o.InForce.Generation, gen, render.Short(next.Revision)))
	default:
		set(CondInForce, false, ReasonRollingOut, fmt.Sprintf("revision %s is not in force yet: its rollout has not finished (sluice get rollouts)", render.Short(next.Revision)))
	}
	return next, changed || next.Revision != prev.Revision || next.HeadGeneration != prev.HeadGeneration
}

// Report writes each outcome's status on its resource when it changed.
func (r *kubeRegistry) Report(ctx context.Context, outcomes []Outcome, now time.Time) (int, error) {
	r.mu.Lock()
	seen := r.seen
	r.mu.Unlock()
	written := 0
	var first error
	failed := 0
	for _, o := range outcomes {
		s, ok := seen[o.Origin]
		if !ok {
			continue // a kind without a status, or not listed by the last Fetch
		}
		next, changed := kubeStatus(s.status, o, s.generation, now)
		if !changed {
			continue
		}
		if err := r.writeStatus(ctx, s, next); err != nil {
			failed++
			if first == nil {
				first = err
			}
			continue
		}
		written++
	}
	why := ""
	if first != nil {
		fix := "the next sync tries again"
		if apierrors.IsForbidden(first) {
			fix = "give the configurator's identity patch on <resource>/status"
		}
		why = fmt.Sprintf("status not written on %d resource(s) (%v): %s; the sync is not affected", failed, first, fix)
	}
	r.mu.Lock()
	was := r.statusErr
	r.statusErr = why
	r.mu.Unlock()
	if why != was {
		if why != "" {
			r.log.Warn().Str("reason", why).Msg("kubernetes status write-back failed")
		} else {
			r.log.Info().Msg("kubernetes status write-back works again")
		}
	}
	return written, first
}

// writeStatus merge-patches the status subresource of s with v.
func (r *kubeRegistry) writeStatus(ctx context.Context, s kubeSeen, v kubeStatusValue) error {
	client, err := r.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"status": v})
	if err != nil {
		return err
	}
	res := client.Resource(s.kind.gvr).Namespace(s.namespace)
	wctx, cancel := context.WithTimeout(ctx, kubeStatusTimeout)
	defer cancel()
	if _, err := res.Patch(wctx, s.name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: kubeUserAgent}, "status"); err != nil {
		return fmt.Errorf("patch %s %s/%s status: %w", s.kind.name, s.namespace, s.name, err)
	}
	return nil
}

// statusNote is the note of the last Report, "" when it wrote everything.
func (r *kubeRegistry) statusNote() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusErr
}

// joinNotes joins the non-empty notes.
func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}
