package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
)

// A TTL cut under a leader (a coordinator of an older release starting, an
// operator's `nats kv edit`) is followed at its next renewal: from then on
// the leader renews a quarter of the new TTL apart and believes its lease
// valid no longer than the new TTL allows. Renewing by the 10 s it took the
// lease with, it would write for up to 7.5 s after a renewal, 3.5 s after
// a 4 s TTL could have expired its lease.
func TestElection_TTLCutUnderTheLeader_ItRenewsAndTrustsByTheNewOne(t *testing.T) {
	const took, cut = 10 * time.Second, 4 * time.Second
	s := contract.DefaultSettings()
	s.LeaderLease = took
	env := natstest.Start(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Conn: env.Conn, Settings: s, Now: time.Now, Instance: "c1"}
	log := zerolog.Nop()
	el := newElection(env.Buckets.Leases, took, cfg, log, events.NewEmitter(env.JS, log, Component, time.Now),
		newRoles(env.Conn, cfg.Instance, "test", log, nil))
	l, err := el.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lost atomic.Bool
	done := make(chan struct{})
	go func() { defer close(done); el.keep(ctx, l, func() { lost.Store(true) }) }()
	defer func() { cancel(); <-done }()

	st, err := env.JS.Stream(ctx, contract.StreamOfBucket(contract.BucketLeases))
	if err != nil {
		t.Fatal(err)
	}
	sc := st.CachedInfo().Config
	sc.MaxAge, sc.Duplicates = cut, cut
	if _, err := env.JS.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	// margin: the next renewal, due within 2.5 s, reads the new TTL.
	natstest.Eventually(t, 30*time.Second, "the leader to trust its lease no longer than the cut TTL allows", func() bool {
		return time.Unix(0, l.validUntil.Load()).Before(time.Now().Add(cut - cut/4))
	})
	if got := el.settings().RenewInterval(); got != cut/4 {
		t.Fatalf("renew interval %s after the TTL was cut to %s, want %s", got, cut, cut/4)
	}
	if lost.Load() {
		t.Fatalf("the leader lost its lease when the TTL was cut from %s to %s, both above its renew interval", took, cut)
	}
}
