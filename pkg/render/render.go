// Package render turns intents into content-addressed revisions and
// per-node configs, deterministically: the same intents give the same
// revision id, and the same revision and node labels give the same NodeConfig
// bytes and fingerprint, whatever order the intents or labels came in.
//
// Entry points: RevisionID for a set of intents, NodeConfig for one node of a
// revision, Fingerprint for a NodeConfig.
package render

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ShortLen is how many characters of an id Short keeps.
const ShortLen = 12

// Compare orders intents canonically: by kind token, then name.
func Compare(a, b *sluicev1.Intent) int {
	return cmp.Or(cmp.Compare(intent.KeyToken(intent.Kind(a)), intent.KeyToken(intent.Kind(b))),
		cmp.Compare(a.GetName(), b.GetName()))
}

// Sort sorts intents in place in canonical order (kind token, then name).
func Sort(intents []*sluicev1.Intent) { slices.SortStableFunc(intents, Compare) }

// Sorted returns a sorted copy of the slice; the intents themselves are shared.
func Sorted(intents []*sluicev1.Intent) []*sluicev1.Intent {
	out := slices.Clone(intents)
	Sort(out)
	return out
}

// RevisionID is the content address of a set of intents: the hex sha256 of
// the deterministic protobuf encoding of a Revision holding only the sorted
// intents. Equal content gives an equal id, whatever the order given.
func RevisionID(intents []*sluicev1.Intent) string {
	return hash(&sluicev1.Revision{Intents: Sorted(intents)})
}

// Short is id cut to ShortLen characters, for display.
func Short(id string) string {
	if len(id) > ShortLen {
		return id[:ShortLen]
	}
	return id
}

// Selects reports whether sel selects a node with labels: every label sel
// requires has that value on the node. A nil or empty selector selects every node.
func Selects(sel *sluicev1.NodeSelector, labels map[string]string) bool {
	for k, want := range sel.GetMatchLabels() {
		if got, ok := labels[k]; !ok || got != want {
			return false
		}
	}
	return true
}

// NodeConfig renders what a node with labels runs under rev: the intents
// whose selectors select it, copied without their selectors, in canonical order.
func NodeConfig(rev *sluicev1.Revision, labels map[string]string) *sluicev1.NodeConfig {
	nc := &sluicev1.NodeConfig{}
	for _, in := range rev.GetIntents() {
		if Selects(intent.Selector(in), labels) {
			nc.Intents = append(nc.Intents, intent.WithoutSelector(in))
		}
	}
	Sort(nc.Intents)
	return nc
}

// Fingerprint is the hex sha256 of the deterministic protobuf encoding of nc.
func Fingerprint(nc *sluicev1.NodeConfig) string { return hash(nc) }

func hash(m proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Only invalid UTF-8 in a string field fails to encode; every stored
		// value was decoded from JSON, which cannot carry it.
		panic(fmt.Sprintf("render: encode %T: %v", m, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
