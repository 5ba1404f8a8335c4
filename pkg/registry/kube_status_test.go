package registry

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeStatus_Decision: what a resource's status becomes after a sync,
// and whether that is a write.
func TestKubeStatus_Decision(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	h5 := Revision{ID: "aaaaaaaaaaaaaaaa5", Generation: 5}
	h7 := Revision{ID: "bbbbbbbbbbbbbbbb7", Generation: 7}
	// h8 is an undo's head: an earlier revision's content, as generation 8.
	h8 := Revision{ID: "cccccccccccccccc8", Generation: 8}
	// carried is the status after a sync at t0 of generation 2 carried by h5.
	carried, _ := kubeStatus(kubeStatusValue{}, Outcome{Head: h5}, 2, t0)
	rolled, _ := kubeStatus(carried, Outcome{Head: h5, InForce: h5, InForceHolds: true}, 2, t0)
	refused, _ := kubeStatus(carried, Outcome{Head: h5, Refused: "layer2network/a: vrf: is required with anycastGateways"}, 3, t0)
	type cond struct {
		status metav1.ConditionStatus
		reason string
	}
	for _, c := range []struct {
		name        string
		prev        kubeStatusValue
		o           Outcome
		gen         int64
		wantChanged bool
		wantRev     string
		synced      cond
		inForce     cond
		wantSince   time.Time // InForce's lastTransitionTime
	}{
		{name: "first sync: carried by the head, not in force yet", o: Outcome{Head: h5}, gen: 2, wantChanged: true, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t1},
		{name: "nothing changed: no write", prev: carried, o: Outcome{Head: h5}, gen: 2, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t0},
		{name: "another resource moved the head: still h5, no write", prev: carried, o: Outcome{Head: h7}, gen: 2, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t0},
		{name: "its revision rolled out: in force", prev: carried, o: Outcome{Head: h5, InForce: h5, InForceHolds: true}, gen: 2, wantChanged: true, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"True", ReasonRolledOut}, wantSince: t1},
		{name: "a later revision rolled out: in force", prev: carried, o: Outcome{Head: h7, InForce: h7, InForceHolds: true}, gen: 2, wantChanged: true, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"True", ReasonRolledOut}, wantSince: t1},
		{name: "in force, nothing changed: no write", prev: rolled, o: Outcome{Head: h7, InForce: h7, InForceHolds: true}, gen: 2, wantRev: h5.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"True", ReasonRolledOut}, wantSince: t0},
		{name: "an undo went back past it: the revision in force does not hold it", prev: rolled, o: Outcome{Head: h8, InForce: h8}, gen: 2,
			wantChanged: true, wantRev: h5.ID, synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonSuperseded}, wantSince: t1},
		{name: "carried again after the undo and rolled out: in force", prev: rolled, o: Outcome{Head: h8, InForce: h8, InForceHolds: true}, gen: 2,
			wantRev: h5.ID, synced: cond{"True", ReasonCarried}, inForce: cond{"True", ReasonRolledOut}, wantSince: t0},
		{name: "a new generation is carried by the new head", prev: rolled, o: Outcome{Head: h7, InForce: h5}, gen: 3, wantChanged: true, wantRev: h7.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t1},
		{name: "refused: the field error", prev: carried, o: Outcome{Head: h5, Refused: "layer2network/a: vrf: is required with anycastGateways"}, gen: 3,
			wantChanged: true, wantRev: h5.ID, synced: cond{"False", ReasonRefused}, inForce: cond{"False", ReasonRefused}, wantSince: t0},
		{name: "refused again: no write", prev: refused, o: Outcome{Head: h7, Refused: "layer2network/a: vrf: is required with anycastGateways"}, gen: 3,
			wantRev: h5.ID, synced: cond{"False", ReasonRefused}, inForce: cond{"False", ReasonRefused}, wantSince: t0},
		{name: "fixed after a refusal: carried by the new head", prev: refused, o: Outcome{Head: h7}, gen: 4, wantChanged: true, wantRev: h7.ID,
			synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t0}, // False before and after: no transition
		{name: "a note is in the message, carried all the same", o: Outcome{Head: h5, Note: "spec.anycastMac: sluice has no meaning for it"}, gen: 1,
			wantChanged: true, wantRev: h5.ID, synced: cond{"True", ReasonCarried}, inForce: cond{"False", ReasonRollingOut}, wantSince: t1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := kubeStatus(c.prev, c.o, c.gen, t1)
			if changed != c.wantChanged {
				t.Errorf("changed %v, want %v", changed, c.wantChanged)
			}
			if got.Revision != c.wantRev {
				t.Errorf("revision %s, want %s", got.Revision, c.wantRev)
			}
			for _, w := range []struct {
				typ  string
				want cond
			}{{CondSynced, c.synced}, {CondInForce, c.inForce}} {
				g := meta.FindStatusCondition(got.Conditions, w.typ)
				if g == nil || g.Status != w.want.status || g.Reason != w.want.reason || g.ObservedGeneration != c.gen {
					t.Errorf("%s: %+v, want %s %s at generation %d", w.typ, g, w.want.status, w.want.reason, c.gen)
				}
			}
			if g := meta.FindStatusCondition(got.Conditions, CondInForce); !g.LastTransitionTime.Time.Equal(c.wantSince) {
				t.Errorf("InForce since %v, want %v", g.LastTransitionTime, c.wantSince)
			}
			s := meta.FindStatusCondition(got.Conditions, CondSynced)
			if c.o.Refused != "" && s.Message != c.o.Refused {
				t.Errorf("Synced message %q, want the field error %q", s.Message, c.o.Refused)
			}
			if c.o.Note != "" && s.Message != "revision aaaaaaaaaaaa carries generation 1; "+c.o.Note {
				t.Errorf("Synced message %q, want the revision and the note", s.Message)
			}
		})
	}
}
