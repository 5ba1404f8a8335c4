package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func testEffects(t *testing.T, env *natstest.Env, epochRev uint64, holder string) *kvEffects {
	t.Helper()
	l := &lease{rev: epochRev}
	l.validUntil.Store(time.Now().Add(time.Hour).UnixNano()) // its clock says it leads, whatever happens
	tm, err := startTerm(context.Background(), env.Conn, env.Buckets, l, holder, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &kvEffects{term: tm, now: time.Now, revs: map[string]uint64{}, keys: &fleetKeys{},
		nodeconfigs: store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		rollouts:    store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }),
		refs:        store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
		invalid:     store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })}
}

// TestEffects_DeposedTermWritesNothingEvenToUntouchedKeys: per-key
// compare-and-set only stops a deposed leader where the new leader wrote
// first; the fence stops it everywhere, on keys nobody else touched too.
func TestEffects_DeposedTermWritesNothingEvenToUntouchedKeys(t *testing.T) {
	for _, backend := range []string{"R1", "R3"} {
		t.Run(backend, func(t *testing.T) {
			var env *natstest.Env
			if backend == "R1" {
				env = natstest.Start(t, contract.DefaultSettings())
			} else {
				env = natstest.StartCluster(t, 3, contract.DefaultSettings()).Env
			}
			ctx := context.Background()
			old := testEffects(t, env, 5, "old")
			if err := old.writeDesired(ctx, desiredOf("n1", "a"), nil); err != nil {
				t.Fatalf("the leader's own write: %v", err)
			}
			nu := testEffects(t, env, 6, "new")
			if nu.term.epoch <= old.term.epoch {
				t.Fatalf("new term %d is not above the old %d", nu.term.epoch, old.term.epoch)
			}

			writes := map[string]func() error{
				"desired config of an untouched node": func() error {
					return old.writeDesired(ctx, desiredOf("n2", "stale"), nil)
				},
				"desired config it knows the revision of": func() error {
					return old.writeDesired(ctx, desiredOf("n1", "stale"), nil)
				},
				"invalid fingerprint": func() error {
					return old.recordInvalid(ctx, &sluicev1.InvalidFingerprint{Fingerprint: "deadbeef", Node: "n2"})
				},
				"rollout start": func() error {
					return old.startRollout(ctx, &sluicev1.Rollout{Id: "9-stale", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING})
				},
			}
			for name, write := range writes {
				if err := write(); !errors.Is(err, errDeposed) {
					t.Errorf("%s by the deposed term: err = %v, want errDeposed", name, err)
				}
			}
			for _, key := range []string{"n2.desired"} {
				if _, err := old.nodeconfigs.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("%s exists after the deposed term's write: %v", key, err)
				}
			}
			if d, _ := old.nodeconfigs.Get(ctx, "n1.desired"); d.Value.GetRevision() != "a" {
				t.Errorf("n1.desired = %s, want the old term's last legitimate write", d.Value.GetRevision())
			}
			if _, err := old.invalid.Get(ctx, "deadbeef"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the deposed term recorded a fingerprint: %v", err)
			}
			if _, err := old.rollouts.Get(ctx, "9-stale"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the deposed term created a rollout: %v", err)
			}
			if err := nu.writeDesired(ctx, desiredOf("n2", "b"), nil); err != nil {
				t.Fatalf("the new term's write: %v", err)
			}
		})
	}
}

// desiredOf is a well-formed desired config of node, told apart by its
// revision tag (its config and fingerprint follow from it).
func desiredOf(node, tag string) *sluicev1.DesiredConfig {
	cfg := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: tag}}}
	return &sluicev1.DesiredConfig{Node: node, Revision: tag, Config: cfg, Fingerprint: render.Fingerprint(cfg)}
}

// A term's epoch counts terms: one above the last term's fence, however
// often the lease was renewed meanwhile (its revision grows with every
// renewal: compose showed terms 1, 17, 31). The first term, with no fence
// to read, takes the lease revision.
func TestStartTerm_EpochCountsTerms_NotLeaseRenewals(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	var epochs []uint64
	for _, leaseRev := range []uint64{1, 17, 31} {
		epochs = append(epochs, testEffects(t, env, leaseRev, "c").term.epoch)
	}
	if epochs[0] != 1 || epochs[1] != 2 || epochs[2] != 3 {
		t.Errorf("epochs of three terms at lease revisions 1, 17, 31: %v, want [1 2 3]", epochs)
	}
}
