package configurator

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"unique"

	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The fleet is the nodes' presence as this configurator reads it: a View
// of the nodes bucket (pkg/store), kept by one watch, so that an apply
// verified on the whole fleet (verify.go), refused for known-bad configs
// (knownbad.go) or version skew (incompatible.go), or asked whether the
// store is lost (storeloss.go) lists nothing: at 100,000 nodes a listing
// was 100,000 messages and decodes on the path from an apply to its
// rollout's start, twice. Each answer is what a listing made at that
// instant would hold (store.View).

// newFleet is the View the configurator answers from.
func newFleet(nodes *store.Store[*sluicev1.NodePresence]) *store.View[*sluicev1.NodePresence] {
	in := &interner{sets: map[string]map[string]string{}, feats: map[string][]string{}}
	return store.NewView(nodes, in.slim)
}

// maxLabelSets bounds the label sets interned: a fleet has a few hundred
// (zone × rack × role); past the bound the table starts afresh, which
// costs sharing, never an answer.
const maxLabelSets = 10_000

// interner keeps one copy of each label set and string the presences
// repeat, so that the View holds per node its name and a few pointers.
type interner struct {
	mu    sync.Mutex
	sets  map[string]map[string]string // by canonical form
	feats map[string][]string          // by the features joined
	buf   []byte
}

// slim keeps of p what the fleet's readers use: labels, agent version and
// config features, and the config in force.
func (in *interner) slim(p *sluicev1.NodePresence) *sluicev1.NodePresence {
	return &sluicev1.NodePresence{
		Labels:             in.labels(p.GetLabels()),
		AgentVersion:       unique.Make(p.GetAgentVersion()).Value(),
		ConfigFeatures:     in.features(p.GetConfigFeatures()),
		InForceRevision:    unique.Make(p.GetInForceRevision()).Value(),
		InForceFingerprint: unique.Make(p.GetInForceFingerprint()).Value(),
	}
}

// labels is the one copy of l's label set; no reader may change it.
func (in *interner) labels(l map[string]string) map[string]string {
	if len(l) == 0 {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.buf = in.buf[:0]
	for _, k := range slices.Sorted(maps.Keys(l)) {
		in.buf = append(append(append(append(in.buf, k...), 0), l[k]...), 0)
	}
	if s, ok := in.sets[string(in.buf)]; ok {
		return s
	}
	if len(in.sets) >= maxLabelSets {
		clear(in.sets)
	}
	in.sets[string(in.buf)] = l
	return l
}

// features is the one copy of a list of config features.
func (in *interner) features(f []string) []string {
	if len(f) == 0 {
		return nil
	}
	key := strings.Join(f, "\x00")
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.feats[key]; ok {
		return s
	}
	if len(in.feats) >= maxLabelSets {
		clear(in.feats)
	}
	in.feats[key] = f
	return f
}
