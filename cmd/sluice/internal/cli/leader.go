package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A running rollout moves only while a rollout-coordinator leads. `rollout
// status` and `get rollouts` say so when none does, computed from what is
// stored (nothing asks a coordinator):
//
//   - The lease key (sluice-leases/coordinator) is present: the server
//     removes it one lease (the bucket's TTL) after the last renewal, so a
//     coordinator renewed it within a lease: it leads. Unless the server
//     failed to: a server whose store's disk is full neither stores the
//     renewals nor expires the key (docs/operations.md, "A full store"). A
//     lease last written more than two leases ago (the server's time of
//     the write against ours: a lease of margin for the clocks) is then
//     reported as not renewed since.
//   - The key's delete marker is there (the leader released it, or the
//     server expired it): no one has led since the marker's time. Within a
//     lease of it a standby takes over (it watches the key, and looks again
//     every quarter of a lease),
//     so only a marker older than a lease is reported. Markers live about a
//     lease themselves, so this case is short.
//   - Nothing is stored under the key: no one has led for at least a lease.
//     Since when is then the last leader event of the events stream: a
//     LeadershipReleased or LeadershipLost with no LeadershipAcquired after
//     it is when the last leader stopped. A LeadershipAcquired (a leader
//     that was killed emits nothing more) or the rollout's last write only
//     bound it: the leader was alive then, so the line says "the last sign
//     of one was … ago" rather than claim when it died.

// leaderEvidence is what the stored state says about the coordinator lease.
type leaderEvidence struct {
	present  bool          // the lease key holds a lease
	renewed  time.Time     // when the lease held was last written (the server's time), if present
	holder   string        // the instance the lease held names, if present
	markerAt time.Time     // when the key was deleted or expired, if its marker is still stored
	expired  bool          // the marker is the server's expiry, not a release
	ttl      time.Duration // the leases bucket's TTL: the leader lease
	last     *sluicev1.Event
}

// noLeaderLine is the line saying that no coordinator leads while rollout r
// runs, "" when one does (or r is not running).
func noLeaderLine(r *sluicev1.Rollout, ev leaderEvidence, now time.Time) string {
	if !contract.Active(r.GetPhase()) {
		return ""
	}
	const todo = ": the rollout is not progressing; start a rollout-coordinator"
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	if ev.present {
		if ev.renewed.IsZero() || now.Sub(ev.renewed) <= 2*ev.ttl {
			return ""
		}
		holder := ""
		if ev.holder != "" {
			holder = " (held by " + contract.Quote(ev.holder) + ")"
		}
		return fmt.Sprintf("no coordinator has renewed the lease%s since %s, %s ago; a lease is %s, and the server has not expired it: "+
			"the rollout is not progressing; look at the NATS server (a store whose disk is full takes no write and expires nothing, see docs/operations.md)",
			holder, at(ev.renewed), humanDuration(now.Sub(ev.renewed)), humanDuration(ev.ttl))
	}
	if !ev.markerAt.IsZero() {
		if now.Sub(ev.markerAt) < ev.ttl {
			return "" // a standby takes over within this
		}
		what := "the lease was released"
		if ev.expired {
			what = "the lease expired"
		}
		return fmt.Sprintf("no coordinator has led for %s (%s at %s)%s", humanDuration(now.Sub(ev.markerAt)), what, at(ev.markerAt), todo)
	}
	last := ev.last
	if last != nil && (last.GetType() == contract.EventLeadershipReleased || last.GetType() == contract.EventLeadershipLost) {
		what := "the last leader released the lease"
		if last.GetType() == contract.EventLeadershipLost {
			what = "the last leader lost the lease"
		}
		t := last.GetTime().AsTime()
		return fmt.Sprintf("no coordinator has led for %s (%s at %s)%s", humanDuration(now.Sub(t)), what, at(t), todo)
	}
	// The leader was alive at the latest of these; when it stopped is unknown.
	var sign time.Time
	var what string
	for _, s := range []struct {
		t    time.Time
		what string
	}{
		{r.GetStartedAt().AsTime(), "rollout " + r.GetId() + " started"},
		{r.GetUpdatedAt().AsTime(), "rollout " + r.GetId() + " written"},
		{last.GetTime().AsTime(), "a leader took the lease"},
	} {
		if s.t.Unix() > 0 && s.t.After(sign) {
			sign, what = s.t, s.what
		}
	}
	if sign.IsZero() {
		return "no coordinator holds the lease" + todo
	}
	return fmt.Sprintf("no coordinator holds the lease; the last sign of one was %s ago (%s at %s)%s",
		humanDuration(now.Sub(sign)), what, at(sign), todo)
}

// readLeaderEvidence reads the lease key, its bucket's TTL and the last
// leader event. js must also be a jetstream.StreamManager for the event
// (a JetStream context is); without it the line says less.
func readLeaderEvidence(ctx context.Context, js jetstream.KeyValueManager) (leaderEvidence, error) {
	ev := leaderEvidence{ttl: contract.DefaultSettings().LeaderLease}
	kv, err := bucket(ctx, js, contract.BucketLeases)
	if err != nil {
		return ev, err
	}
	if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 {
		ev.ttl = st.TTL()
	}
	// History, not Get: Get hides a delete marker, whose time is wanted.
	hist, err := leaseHistory(ctx, kv)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return ev, fmt.Errorf("read the coordinator lease: %w", err)
	case hist[len(hist)-1].Operation() == jetstream.KeyValuePut:
		last := hist[len(hist)-1]
		ev.present, ev.renewed = true, last.Created()
		var l sluicev1.LeaderLease
		if store.Unmarshal(last.Value(), &l) == nil {
			ev.holder = l.GetHolder()
		}
		return ev, nil
	default:
		last := hist[len(hist)-1]
		// The server's expiry marker reads as a purge, a release as a delete.
		ev.markerAt, ev.expired = last.Created(), last.Operation() == jetstream.KeyValuePurge
	}
	sm, ok := js.(jetstream.StreamManager)
	if !ok {
		return ev, nil
	}
	stream, err := sm.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return ev, nil // no events stream: the rollout's own times say what they can
	}
	msg, err := stream.GetLastMsgForSubject(ctx, contract.EventSubject(contract.KindLeader, contract.ComponentCoordinator))
	if err != nil {
		return ev, nil
	}
	// Only a leadership event the coordinator may publish says when the
	// last term ended: anything else on the subject is not evidence.
	if last, err := events.Read(msg.Subject, msg.Data); err == nil {
		if last.GetTime() == nil {
			last.Time = timestamppb.New(msg.Time)
		}
		ev.last = last
	}
	return ev, nil
}

// noLeaderNote is noLeaderLine for rollout r as stored now; "" when a
// coordinator leads or the lease cannot be read (the rest of the output
// does not depend on it).
func (a *app) noLeaderNote(ctx context.Context, js jetstream.KeyValueManager, r *sluicev1.Rollout) string {
	if !contract.Active(r.GetPhase()) {
		return ""
	}
	ev, err := readLeaderEvidence(ctx, js)
	if err != nil {
		return ""
	}
	return noLeaderLine(r, ev, a.now())
}

// leaseHistory reads the coordinator lease's history. A History that
// starts while the server expires the marker can wait for a message that
// is gone, so each try has its own deadline and a stalled one is tried
// again (the marker is then gone: ErrKeyNotFound).
func leaseHistory(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	for try := 1; ; try++ {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		hist, err := kv.History(actx, contract.LeaseCoordinator)
		cancel()
		if err == nil || try == 3 || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return hist, err
		}
	}
}
