package chaos

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// withPendingConfirm is withRegistry with a third intent and a
// registry-confirm-pending: reg-1 out from 20 s to 32 s, its pending set
// confirmed at 21 s (its settle period due to end at 26 s); reg-3, not in
// the confirmed set, out from 23 s to 26 s; marks as given, and the
// configurator's RegistryDeletionConfirmed event if said.
func withPendingConfirm(said bool, marks map[string]float64) *Observation {
	o := withRegistry(5, nil)
	r := o.Registry
	r.Intents = append(r.Intents, "routingtable.reg-3")
	c := ConfirmObs{Intents: []string{"routingtable.reg-1"}, From: at(20), Confirmed: at(21), Digest: "0123456789abcdef",
		Settles: at(26), Back: at(32)}
	r.Confirms = append(r.Confirms, c)
	r.Absent["routingtable.reg-1"] = append(r.Absent["routingtable.reg-1"], Span{From: at(20), To: at(32)})
	r.Absent["routingtable.reg-3"] = []Span{{From: at(23), To: at(26)}}
	for _, key := range sortedKeys(marks) {
		o.IntentWrites = append(o.IntentWrites, KVOp{Key: key, Revision: uint64(len(o.IntentWrites) + 1), At: at(marks[key]),
			Intent: &sluicev1.StoredIntent{Source: "gitops", MarkedForDeletion: true,
				Intent: &sluicev1.Intent{Name: key[len("routingtable."):], Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 60}}}}})
	}
	if said {
		o.Events = append(o.Events, &sluicev1.Event{Kind: "registry", Id: "gitops", Type: "RegistryDeletionConfirmed", Time: timestamppb.New(at(27)),
			Reason: "registry gitops: the pending deletion 0123456789abcdef of 1 intent went ahead, confirmed by an operator"})
	}
	return o
}

// An operator's confirmation of a pending set marks it at once (issue 47:
// the confirmed branch of a pending set), and what it did not name waits
// out its settle period (I7).
func TestCheck_ConfirmPending_MarksAtOnce(t *testing.T) {
	for _, tt := range []struct {
		name  string
		given *Observation
		want  string // the invariant violated, "" for none
	}{
		{"confirmed, marked at once", withPendingConfirm(false, map[string]float64{"routingtable.reg-1": 21.4}), ""},
		{"confirmed, marked once its period ran out, and nothing says the confirmation did it", withPendingConfirm(false, map[string]float64{"routingtable.reg-1": 26.2}), "ConfirmPending"},
		{"confirmed, marked late by the confirmation (a slow configurator)", withPendingConfirm(true, map[string]float64{"routingtable.reg-1": 26.2}), ""},
		{"confirmed, never marked", withPendingConfirm(false, nil), "ConfirmPending"},
		{"confirmed, marked only long after", withPendingConfirm(true, map[string]float64{"routingtable.reg-1": 50}), "ConfirmPending"},
		{"marked before the confirmation", withPendingConfirm(false, map[string]float64{"routingtable.reg-1": 20.5}), "I7"},
		{"the file dropped after it, not in the confirmed set, marked early", withPendingConfirm(false,
			map[string]float64{"routingtable.reg-1": 21.4, "routingtable.reg-3": 24}), "I7"},
		{"no confirmation stored: not judged, I7 as ever", func() *Observation {
			o := withPendingConfirm(false, nil)
			o.Registry.Confirms[0].Confirmed, o.Registry.Confirms[0].Digest = time.Time{}, ""
			return o
		}(), ""},
		{"garbage over the registry's confirmation: not judged", func() *Observation {
			o := withPendingConfirm(false, nil)
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketControl, Key: contract.RegistryConfirmKey("gitops"), At: at(22)})
			return o
		}(), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(tt.given)
			if tt.want == "" && len(vs) > 0 {
				t.Fatalf("want no violation; got %v", vs)
			}
			if tt.want != "" && !slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == tt.want }) {
				t.Fatalf("want a %s violation; got %v", tt.want, vs)
			}
		})
	}
}

// Pending confirmations are drawn in the first 200 seeds, some on one
// server (so on virtual time too), and each is what the branch needs: no
// more than the hold share dropped (pending, not held), the later file
// not among them and out less than the settle period.
func TestPick_PendingConfirmsArePending(t *testing.T) {
	var seeds, single []uint64
	for seed := uint64(1); seed <= 200; seed++ {
		sc := Pick(seed)
		for _, f := range sc.Faults {
			p := f.Pending
			if p == nil {
				continue
			}
			seeds = append(seeds, seed)
			if !sc.Cluster {
				single = append(single, seed)
			}
			if n := sc.Registry.Intents; len(p.Drop) < 1 || 2*len(p.Drop) > n {
				t.Errorf("seed %d: %s: drops %d of %d files, not one up to half", seed, p, len(p.Drop), n)
			}
			if slices.Contains(p.Drop, p.Then) || p.Then < 0 || p.Then >= sc.Registry.Intents {
				t.Errorf("seed %d: %s: the later file is one of the confirmed set, or not the registry's", seed, p)
			}
			if p.For <= 0 || p.For >= registrySettle {
				t.Errorf("seed %d: %s: the later file out %s, not less than the settle period %s", seed, p, p.For, registrySettle)
			}
		}
	}
	if len(single) < 5 {
		t.Errorf("pending confirmations in seeds 1–200: %v, %v of them on one server; want 5 at least on one server", seeds, single)
	}
	t.Logf("pending confirmations in seeds 1–200: %v; on one server: %v", seeds, single)
}
