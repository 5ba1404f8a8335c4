package configurator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A git registry's commit in force (the commit of its last merged answer)
// is kept in the registry while it is open, and in its status (commit,
// with the spec revision it belongs to). A registry opened anew, by a
// configurator that starts or a syncer started again, is given the stored
// one before its first fetch (seedInForce), so that a branch rewound or
// rewritten while no configurator watched it is held exactly as a live
// rewind is:
//
//   - no status: the registry was never synced; its first answer is taken.
//   - a status of the same spec revision: its commit is the commit in force.
//   - a status of another spec revision: the spec was stored anew (sluice
//     registry add --update), which accepts the branch as it is; the stored
//     commit is cleared, so a restart before the next sync accepts it too.
//   - a status that does not decode: the commit in force is not known, and
//     a lost record is no evidence that the history is new: every head is
//     held (the status, written anew, says why) until the spec is stored anew.
//
// Every write is a compare-and-set on the status read.

// seedInForce gives reg the commit in force its stored status records;
// false when the status could not be read or written (try again: nothing
// is fetched before). Registries that keep no commit need nothing.
func (r *registries) seedInForce(ctx context.Context, name string, specRev uint64, reg registry.Registry, log zerolog.Logger) bool {
	seeder, ok := reg.(registry.InForceSeeder)
	if !ok {
		return true
	}
	cur, err := r.status.Get(ctx, name)
	if errors.Is(err, store.ErrUndecodable) {
		return r.holdUnknown(ctx, name, specRev, reg, seeder, cur.Revision, err, log)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("read the registry's status for its commit in force; not fetched until it is read")
		}
		return false
	}
	var commit string
	var unknown bool
	_, err = r.status.Mutate(ctx, name, func(st *sluicev1.RegistryStatus) (*sluicev1.RegistryStatus, error) {
		commit, unknown = "", false
		if st == nil { // never synced: whatever its first answer is, it is the first
			return &sluicev1.RegistryStatus{Name: name, Kind: reg.Kind(), Location: reg.Location(),
				State: sluicev1.RegistryState_REGISTRY_STATE_SYNCING, SpecRevision: specRev, UpdatedAt: nowProto(r.cfg.now)}, nil
		}
		switch st.GetSpecRevision() {
		case specRev:
			commit, unknown = st.GetCommit().GetHash(), st.GetCommitUnknown()
			return nil, store.ErrUnchanged
		case 0: // written before statuses named their spec: it is this one's
			commit, unknown = st.GetCommit().GetHash(), st.GetCommitUnknown()
		default:
			log.Info().Str("commit", contract.ShortHash(st.GetCommit().GetHash())).
				Msg("registry spec stored anew: its branch is accepted as it is, whatever the commit in force was")
			st.Commit, st.CommitUnknown = nil, false
		}
		st.SpecRevision, st.UpdatedAt = specRev, nowProto(r.cfg.now)
		return st, nil
	})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("write the registry's status for its commit in force; not fetched until it is written")
		}
		return false
	}
	switch {
	case unknown:
		seeder.HoldUnknown(fmt.Sprintf("the registry's stored status %s/%s did not decode when a configurator started", contract.BucketRegistries, name))
	case commit != "":
		if err := seeder.SeedInForce(commit); err != nil {
			seeder.HoldUnknown(fmt.Sprintf("the registry's stored status %s/%s: %v", contract.BucketRegistries, name, err))
		}
	}
	return true
}

// holdUnknown replaces a status that does not decode (compare-and-set on
// its revision) with one that says the commit in force is not known, and
// holds every head of reg.
func (r *registries) holdUnknown(ctx context.Context, name string, specRev uint64, reg registry.Registry, seeder registry.InForceSeeder,
	rev uint64, cause error, log zerolog.Logger) bool {
	// The cause may quote the bytes that do not decode: a status holds UTF-8.
	why := fmt.Sprintf("the registry's stored status %s/%s does not decode (%s)", contract.BucketRegistries, name, strings.ToValidUTF8(cause.Error(), "?"))
	st := &sluicev1.RegistryStatus{Name: name, Kind: reg.Kind(), Location: reg.Location(), State: sluicev1.RegistryState_REGISTRY_STATE_HELD,
		Error:        why + ": the commit in force is not known; every head is held until the registry is re-added (sluice registry add --update)",
		SpecRevision: specRev, CommitUnknown: true, UpdatedAt: nowProto(r.cfg.now)}
	if _, err := r.status.Update(ctx, name, st, rev); err != nil {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("replace the registry's undecodable status; not fetched until it is written")
		}
		return false
	}
	log.Warn().Str(logging.FieldReason, why).Msg("registry's commit in force unknown: every head is held")
	seeder.HoldUnknown(why)
	return true
}
