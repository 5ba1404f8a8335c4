package configurator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The git cache (Config.GitCache) holds one bare clone per git registry of
// a server and URL, <name>-<hash of the URL>.git (registry.CloneDir). A
// clone nobody reads any more is removed: that of a registry whose spec
// key is read from the store deleted, and that of a registry whose spec
// names another URL (or is no longer a git registry of a server). Each
// removal rests on what the store says of that registry: a listing that
// fails, or is empty, removes nothing; a name the store knows nothing of
// (no key, not even a delete marker) keeps its clone, as does a spec that
// does not decode, or a clone a syncer runs on. Only directories whose name
// has the clone form are looked at, never a symbolic link, never a file:
// what else is in the cache is not the configurator's.
//
// The pruner runs once the specs present at start are known and after
// each change of a spec, once the syncers that change stopped have
// returned (so no fetch writes into a clone being removed).

// cacheEntry is one directory entry of the git cache.
type cacheEntry struct {
	name string      // base name
	mode fs.FileMode // type bits, as lstat gives them (a symlink is a symlink)
}

// staleClone is a clone to remove and why.
type staleClone struct {
	dir, registry, reason string
}

// staleClones decides which clones of the cache to remove. specs is the
// listing of the registry spec keys, deleted ones included (their delete
// markers); inUse the clone directories of the running syncers. Pure: the
// answer is in the cache's name order.
func staleClones(entries []cacheEntry, specs []store.Entry[*sluicev1.RegistrySpec], inUse []string) []staleClone {
	type known struct {
		deleted, undecodable bool
		dir                  string // the clone the live spec reads; "" for none
	}
	byName := map[string]known{}
	for _, e := range specs {
		name, isSpec, ok := contract.RegistryOfKey(e.Key)
		if !ok || !isSpec {
			continue
		}
		k := known{deleted: e.Deleted, undecodable: !e.Deleted && e.Err != nil}
		if !e.Deleted && e.Err == nil && e.Value != nil {
			spec := e.Value
			if spec.GetName() != name {
				spec = &sluicev1.RegistrySpec{Name: name, Source: spec.GetSource()}
			}
			k.dir = registry.CloneDir(spec)
		}
		byName[name] = k
	}
	var out []staleClone
	for _, en := range entries {
		if !en.mode.IsDir() || slices.Contains(inUse, en.name) {
			continue
		}
		name, ok := registry.RegistryOfCloneDir(en.name)
		if !ok {
			continue
		}
		k, seen := byName[name]
		switch {
		case !seen, k.undecodable, k.dir == en.name:
		case k.deleted:
			out = append(out, staleClone{en.name, name, fmt.Sprintf("registry %s was removed", name)})
		case k.dir == "":
			out = append(out, staleClone{en.name, name, fmt.Sprintf("registry %s no longer reads a git server", name)})
		default:
			out = append(out, staleClone{en.name, name, fmt.Sprintf("registry %s now reads another URL (its clone is %s)", name, k.dir)})
		}
	}
	slices.SortFunc(out, func(a, b staleClone) int { return strings.Compare(a.dir, b.dir) })
	return out
}

// wantPrune asks the pruner to look at the git cache (no-op without one).
func (r *registries) wantPrune() {
	select {
	case r.prune <- struct{}{}:
	default:
	}
}

// pruner removes the stale clones of the git cache each time it is asked
// to, until ctx ends; a listing that fails is tried again with backoff.
func (r *registries) pruner(ctx context.Context) {
	retry := backoff.New(reconcileAgain)
	again := time.NewTimer(0)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.prune:
			again.Stop()
		case <-again.C:
		}
		if err := r.pruneOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := retry.Next()
			r.log.Warn().Err(err).Str("cache", r.cfg.gitCache).Dur("retry_in", wait).
				Msg("git cache not pruned: the registries could not be listed, so every clone stays")
			again.Reset(wait)
			continue
		}
		retry.Reset()
	}
}

// pruneOnce lists the registries and removes the clones staleClones names.
func (r *registries) pruneOnce(ctx context.Context) error {
	r.mu.Lock()
	retired := r.retired
	r.retired = nil
	r.mu.Unlock()
	for _, done := range retired {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	specs, err := r.listSpecs(ctx, contract.RegistryKeyPrefix+">")
	if err != nil {
		return err
	}
	dirents, err := os.ReadDir(r.cfg.gitCache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.log.Warn().Err(err).Str("cache", r.cfg.gitCache).Msg("git cache not pruned: it cannot be read")
		return nil
	}
	entries := make([]cacheEntry, len(dirents))
	for i, d := range dirents {
		entries[i] = cacheEntry{name: d.Name(), mode: d.Type()}
	}
	r.mu.Lock()
	var inUse []string
	for _, sy := range r.running {
		if d := registry.CloneDir(sy.spec); d != "" {
			inUse = append(inUse, d)
		}
	}
	r.mu.Unlock()
	for _, st := range staleClones(entries, specs, inUse) {
		path := filepath.Join(r.cfg.gitCache, st.dir)
		// Looked at again just before: still a directory, not a link.
		if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
			continue
		}
		log := r.log.With().Str("registry", st.registry).Str("dir", path).Logger()
		if err := os.RemoveAll(path); err != nil {
			log.Warn().Err(err).Msg("remove a stale git clone")
			continue
		}
		log.Info().Str(logging.FieldReason, st.reason+": its clone is no longer read").Msg("git clone removed")
	}
	return nil
}
