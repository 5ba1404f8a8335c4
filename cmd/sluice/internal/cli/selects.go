package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// selectsNone warns of each of intents whose node selector selects none of
// the present nodes (their labels): stored, it reaches no node, which is
// seldom what was meant (a label value mistyped, or a dev fleet's rack-1
// on a fleet whose racks are rack-a1 …). Nothing is said while no node is
// present, and of an intent without a selector (it selects every node).
func selectsNone(intents []*sluicev1.Intent, present []map[string]string) []string {
	if len(present) == 0 {
		return nil
	}
	var out []string
	for _, in := range render.Sorted(intents) {
		sel := intent.Selector(in)
		if len(sel.GetMatchLabels()) == 0 || slices.ContainsFunc(present, func(l map[string]string) bool { return render.Selects(sel, l) }) {
			continue
		}
		out = append(out, fmt.Sprintf("warning: %s selects 0 of the %d present nodes (nodeSelector %s): no node gets it; sluice get nodes shows their labels",
			intent.ID(in), len(present), selectorString(sel)))
	}
	return out
}

func selectorString(sel *sluicev1.NodeSelector) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel.GetMatchLabels())) {
		parts = append(parts, k+"="+sel.GetMatchLabels()[k])
	}
	return strings.Join(parts, ",")
}

// presentLabels reads the labels of every present node, for selectsNone;
// nil when they cannot be read (a warning is not worth failing for).
func (a *app) presentLabels(ctx context.Context) []map[string]string {
	sn, err := a.bind(ctx, contract.BucketNodes)
	if err != nil {
		return nil
	}
	defer sn.Close()
	kv := sn.kv[contract.BucketNodes]
	nodes, err := store.New(kv, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return nil
	}
	return labelsOf(nodes)
}

// labelsOf are the labels of the readable presences.
func labelsOf(nodes []store.Entry[*sluicev1.NodePresence]) []map[string]string {
	var out []map[string]string
	for _, n := range nodes {
		if n.Err == nil && !contract.IsControlKey(n.Key) {
			out = append(out, n.Value.GetLabels())
		}
	}
	return out
}
