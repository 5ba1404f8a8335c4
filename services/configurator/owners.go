package configurator

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Every intent has one owner, its source: the built-in registry (sources
// "api" and "undo": sluice apply, delete and undo) or the registry that
// brought it. Only its owner changes it. An apply or delete of an intent a
// registry owns is refused naming the registry; once the registry is
// removed (sluice registry remove), its intents belong to nobody and the
// next apply takes them over.

// registryNames is the set of registries declared in the control bucket.
func (s *Service) registryNames(ctx context.Context) (map[string]bool, error) {
	keys, err := s.st.specs.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list registries: %w", err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		if name, spec, ok := contract.RegistryOfKey(k); ok && spec {
			out[name] = true
		}
	}
	return out, nil
}

// refuseOwned refuses a request that would change intents (keys) a
// registry owns: the registry would put them back at its next sync.
func (s *Service) refuseOwned(ctx context.Context, what string, keys []string, live map[string]store.Entry[*sluicev1.StoredIntent]) error {
	var owned []string
	var regs map[string]bool
	for _, key := range keys {
		cur, ok := live[key]
		src := cur.Value.GetSource()
		if !ok || cur.Value.GetMarkedForDeletion() || src == contract.SourceAPI || src == contract.SourceUndo || src == "" {
			continue
		}
		if regs == nil {
			var err error
			if regs, err = s.registryNames(ctx); err != nil {
				return unavailable(err)
			}
		}
		if !regs[src] {
			continue // its registry was removed: nobody owns it
		}
		where := ""
		if o := cur.Value.GetOrigin(); o != "" {
			where = " (declared in " + o + ")"
		}
		owned = append(owned, fmt.Sprintf("%s is owned by registry %s%s", intent.ID(cur.Value.GetIntent()), src, where))
	}
	if len(owned) == 0 {
		return nil
	}
	return &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
		"%s; change it in that registry, which would otherwise undo this %s at its next sync (or remove the registry with sluice registry remove to manage its intents with sluice apply); nothing was stored",
		strings.Join(owned[:min(len(owned), maxListedErrors)], "; "), what)}
}
