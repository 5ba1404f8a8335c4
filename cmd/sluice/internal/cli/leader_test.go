package cli

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestNoLeaderLine(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 10, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(-d) }
	ts := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(at(d)) }
	running := &sluicev1.Rollout{Id: "7-aaaaaaaaaaaa", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		StartedAt: ts(time.Hour), UpdatedAt: ts(3 * time.Minute)}
	reverting := &sluicev1.Rollout{Id: "7-aaaaaaaaaaaa", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, StartedAt: ts(time.Hour)}
	ended := &sluicev1.Rollout{Id: "7-aaaaaaaaaaaa", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}
	event := func(typ string, d time.Duration) *sluicev1.Event {
		return &sluicev1.Event{Kind: contract.KindLeader, Id: contract.ComponentCoordinator, Type: typ, Time: ts(d)}
	}
	const todo = ": the rollout is not progressing; start a rollout-coordinator"
	lease := 10 * time.Second
	tests := []struct {
		name  string
		given *sluicev1.Rollout
		ev    leaderEvidence
		want  string
	}{
		{name: "the lease is held", given: running, ev: leaderEvidence{present: true, ttl: lease}},
		{name: "the lease was renewed within two leases", given: running, ev: leaderEvidence{present: true, renewed: at(2 * lease), ttl: lease}},
		// Issue 38, item 5: a server whose disk is full neither stores the
		// renewals nor expires the key; the lease reads as held.
		{name: "the lease is held but nobody renewed it", given: running,
			ev: leaderEvidence{present: true, renewed: at(74 * time.Second), holder: "coord-1", ttl: lease},
			want: "no coordinator has renewed the lease (held by coord-1) since 2026-05-01T12:08:46Z, 1m14s ago; a lease is 10s, and the server has not expired it: " +
				"the rollout is not progressing; look at the NATS server (a store whose disk is full takes no write and expires nothing, see docs/operations.md)"},
		{name: "no rollout runs", given: ended, ev: leaderEvidence{ttl: lease}},
		{name: "no active rollout", given: nil, ev: leaderEvidence{ttl: lease}},
		{name: "released within a lease: a standby takes over", given: running, ev: leaderEvidence{markerAt: at(5 * time.Second), ttl: lease}},
		{name: "expired longer than a lease ago", given: running, ev: leaderEvidence{markerAt: at(130 * time.Second), expired: true, ttl: lease},
			want: "no coordinator has led for 2m10s (the lease expired at 2026-05-01T12:07:50Z)" + todo},
		{name: "released longer than a lease ago", given: reverting, ev: leaderEvidence{markerAt: at(time.Minute), ttl: lease},
			want: "no coordinator has led for 1m (the lease was released at 2026-05-01T12:09:00Z)" + todo},
		{name: "gone; the last leader released it", given: running,
			ev:   leaderEvidence{ttl: lease, last: event(contract.EventLeadershipReleased, 130*time.Second)},
			want: "no coordinator has led for 2m10s (the last leader released the lease at 2026-05-01T12:07:50Z)" + todo},
		{name: "gone; the last leader lost it", given: running,
			ev:   leaderEvidence{ttl: lease, last: event(contract.EventLeadershipLost, 5*time.Minute)},
			want: "no coordinator has led for 5m (the last leader lost the lease at 2026-05-01T12:05:00Z)" + todo},
		{name: "gone; a leader was killed after the rollout's last write", given: running,
			ev:   leaderEvidence{ttl: lease, last: event(contract.EventLeadershipAcquired, 2*time.Hour)},
			want: "no coordinator holds the lease; the last sign of one was 3m ago (rollout 7-aaaaaaaaaaaa written at 2026-05-01T12:07:00Z)" + todo},
		{name: "gone; a leader was killed after it took the lease", given: reverting,
			ev:   leaderEvidence{ttl: lease, last: event(contract.EventLeadershipAcquired, 20*time.Minute)},
			want: "no coordinator holds the lease; the last sign of one was 20m ago (a leader took the lease at 2026-05-01T11:50:00Z)" + todo},
		{name: "gone; nothing says since when", given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING},
			ev: leaderEvidence{ttl: lease}, want: "no coordinator holds the lease" + todo},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := noLeaderLine(tc.given, tc.ev, now); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestRolloutStatusAndGetRollouts_SayWhenNoCoordinatorLeads(t *testing.T) {
	s := contract.DefaultSettings()
	// margin: the lease is the bucket's TTL, and its delete marker's. The
	// checks that a held lease, and a marker younger than a lease, give no
	// line run three commands (milliseconds) within 5s of the write; the
	// marker is gone about 5s later.
	s.LeaderLease = 5 * time.Second
	env := natstest.Start(t, s)
	ctx := context.Background()
	r := &sluicev1.Rollout{Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		// margin: "5h ago" holds for the hour after this.
		Reason: "head moved to generation 5", StartedAt: timestamppb.New(time.Now().Add(-5 * time.Hour)),
		Counts: &sluicev1.RolloutCounts{Total: 2, Pending: 2}}
	seed{rollouts: []*sluicev1.Rollout{r}}.write(t, env)
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	if _, err := refs.Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: revB, Generation: 5}); err != nil {
		t.Fatal(err)
	}
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })

	// check runs both commands: the line is there (containing want) or not ("").
	check := func(t *testing.T, want string) {
		t.Helper()
		code, stdout, stderr := sluice(t, env.URL, "rollout", "status")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if code != 0 || len(lines) < 2 {
			t.Fatalf("rollout status: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
		}
		if last := lines[len(lines)-1]; last != "rollout 5-bbbbbbbbbbbb is progressing: head moved to generation 5" {
			t.Errorf("rollout status: the outcome is not the last line:\n%s", stdout)
		}
		got := ""
		if l := lines[len(lines)-2]; strings.HasPrefix(l, "leader    ") {
			got = strings.TrimPrefix(l, "leader    ")
		}
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("rollout status: leader line %q, want one containing %q:\n%s", got, want, stdout)
		}
		code, stdout, stderr = sluice(t, env.URL, "get", "rollouts")
		if code != 0 {
			t.Fatalf("get rollouts: exit %d: %s", code, stderr)
		}
		has := strings.Contains(stdout, "no coordinator")
		if want == "" && has || want != "" && !strings.Contains(stdout, "\n\n"+want[:20]) {
			t.Errorf("get rollouts, want the line %q below the table:\n%s", want, stdout)
		}
		_, stdout, stderr = sluice(t, env.URL, "get", "rollouts", "-o", "json")
		if strings.Contains(stdout, "no coordinator") || want != "" && !strings.Contains(stderr, want) {
			t.Errorf("get rollouts -o json: the line belongs on stderr only; stdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	}

	t.Run("nothing stored of a leader: the rollout's start is the last sign of one", func(t *testing.T) {
		check(t, "no coordinator holds the lease; the last sign of one was 5h ago (rollout 5-bbbbbbbbbbbb started at ")
	})
	rev, err := leases.Create(ctx, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: "coord-a", Session: "s1", AcquiredAt: timestamppb.Now(), RenewedAt: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a coordinator holds the lease", func(t *testing.T) { check(t, "") })

	// The leader releases the lease two minutes ago, as its event says.
	if err := leases.Delete(ctx, contract.LeaseCoordinator, rev); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, env, &sluicev1.Event{Component: contract.ComponentCoordinator, Kind: contract.KindLeader, Id: contract.ComponentCoordinator, Type: contract.EventLeadershipReleased,
		Time: timestamppb.New(time.Now().Add(-2 * time.Minute)), Reason: "stopped"})
	t.Run("released within a lease: a standby may take over yet", func(t *testing.T) { check(t, "") })
	// margin: the poll ends as soon as the marker is gone (about a lease);
	// within 30s the release, 2m before the delete, still reads "2m…".
	natstest.Eventually(t, 30*time.Second, "the release marker to age out", func() bool {
		// Each attempt has its own deadline: a History that starts while
		// the marker expires can wait for a message that is gone (seen
		// hung until the package's timeout).
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := env.Buckets.Leases.History(actx, contract.LeaseCoordinator)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	t.Run("released longer than a lease ago", func(t *testing.T) {
		check(t, "no coordinator has led for 2m") // and a few seconds: the marker aged out meanwhile
		_, stdout, _ := sluice(t, env.URL, "rollout", "status")
		if !strings.Contains(stdout, "(the last leader released the lease at ") {
			t.Errorf("the line does not say since when:\n%s", stdout)
		}
	})
}
