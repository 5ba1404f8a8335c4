package bench

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestTerms_CountsChangesOfHolderOrTerm(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	lease := func(holder, session string, acquired, renewed time.Duration, epoch uint64) store.Entry[*sluicev1.LeaderLease] {
		return store.Entry[*sluicev1.LeaderLease]{Key: contract.LeaseCoordinator, Value: &sluicev1.LeaderLease{
			Holder: holder, Session: session, Epoch: epoch,
			AcquiredAt: timestamppb.New(t0.Add(acquired)), RenewedAt: timestamppb.New(t0.Add(renewed))}}
	}
	gone := store.Entry[*sluicev1.LeaderLease]{Key: contract.LeaseCoordinator, Deleted: true}
	initialDone := store.Entry[*sluicev1.LeaderLease]{}
	tests := []struct {
		name  string
		given []store.Entry[*sluicev1.LeaderLease]
		want  int
	}{
		{name: "renewals of one term: none", want: 0, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), initialDone, lease("a", "s1", 0, time.Second, 5), lease("a", "s1", 0, 2*time.Second, 5)}},
		{name: "the epoch announced after the acquisition is the same term", want: 0, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 0), lease("a", "s1", 0, 0, 7), lease("a", "s1", 0, time.Second, 7)}},
		{name: "the standby takes the expired lease: one", want: 1, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), gone, lease("b", "s2", 3*time.Second, 3*time.Second, 0), lease("b", "s2", 3*time.Second, 3*time.Second, 9)}},
		{name: "the standby takes it over without an expiry seen: one", want: 1, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), lease("b", "s2", 3*time.Second, 3*time.Second, 9)}},
		{name: "the leader acquires it again after an expiry: a new term, one", want: 1, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), gone, lease("a", "s1", 4*time.Second, 4*time.Second, 11)}},
		{name: "expired and not yet taken: one", want: 1, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), gone}},
		{name: "two takeovers: two", want: 2, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), lease("b", "s2", time.Second, time.Second, 6), gone, lease("a", "s1", 5*time.Second, 5*time.Second, 8)}},
		{name: "an unreadable value changes nothing", want: 0, given: []store.Entry[*sluicev1.LeaderLease]{
			lease("a", "s1", 0, 0, 5), {Key: contract.LeaseCoordinator, Err: store.ErrUndecodable}, lease("a", "s1", 0, time.Second, 5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c terms
			for _, e := range tt.given {
				c.see(e)
			}
			if got := c.count(); got != tt.want {
				t.Errorf("count() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestTerms_RenewedIsTheLatestRenewal(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var c terms
	for _, r := range []time.Duration{time.Second, 3 * time.Second, 2 * time.Second} {
		c.see(store.Entry[*sluicev1.LeaderLease]{Key: contract.LeaseCoordinator, Value: &sluicev1.LeaderLease{
			Holder: "a", AcquiredAt: timestamppb.New(t0), RenewedAt: timestamppb.New(t0.Add(r))}})
	}
	if want := t0.Add(3 * time.Second); !c.renewed.Equal(want) {
		t.Errorf("renewed = %s, want %s", c.renewed, want)
	}
}
