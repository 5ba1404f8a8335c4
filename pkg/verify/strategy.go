package verify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// strategy checks the strategy against the present nodes: a failure-domain
// label no node carries makes every node one "(unlabelled)" domain, so
// "one zone at a time" becomes everything in one stage; one some nodes lack
// puts those last, together. A first wave or a maxParallel count larger
// than the fleet does what the operator did not ask: the canary is the
// whole fleet. Nothing is said while no node is present.
func (v *verifier) strategy(st *sluicev1.Strategy) {
	total := v.fleet.total
	if st == nil || total == 0 {
		return
	}
	if k := st.GetFailureDomain(); k != "" {
		without := func(l map[string]string) bool { _, ok := l[k]; return !ok }
		names, n := v.fleet.where(without)
		switch {
		case n == total:
			v.addNodes(RuleDomainMissing, nil, names, n, fmt.Sprintf("failure domain %q: none of the %d present nodes has that label, so every node is in one domain \"(unlabelled)\" and the rollout takes them all in one stage%s",
				k, total, v.labelHint(k)), "name a label key the nodes carry (sluice get nodes shows them)")
		case n > 0:
			v.addNodes(RuleDomainPartial, nil, names, n, fmt.Sprintf("failure domain %q: %d of the %d present nodes have no such label; they go last, all in one stage", k, n, total),
				fmt.Sprintf("label those nodes with %s, or accept that they roll out together", k))
		}
	}
	if fw := int(st.GetFirstWave()); fw > total {
		v.addNodes(RuleStrategyExceeds, nil, nil, total, fmt.Sprintf("first wave %d is larger than the %d present nodes: the canary is the whole fleet", fw, total),
			fmt.Sprintf("make the first wave a few nodes, e.g. %d", max(1, total/10)))
	}
	if mp := strings.TrimSpace(st.GetMaxParallel()); mp != "" && !strings.HasSuffix(mp, "%") {
		if n, err := strconv.Atoi(mp); err == nil && n > total {
			v.addNodes(RuleStrategyExceeds, nil, nil, total, fmt.Sprintf("maxParallel %d is larger than the %d present nodes: every node is configured at once", n, total),
				"use a smaller count, or a percentage such as 10%")
		}
	}
}

// labelHint names the label keys nearest to k that nodes carry: "; the
// nodes carry zone, rack" or "; did you mean zone?".
func (v *verifier) labelHint(k string) string {
	seen := map[string]bool{}
	var keys []string
	for _, s := range v.fleet.sets {
		for lk := range s.labels {
			if !seen[lk] {
				seen[lk] = true
				keys = append(keys, lk)
			}
		}
	}
	if len(keys) == 0 {
		return "; the nodes carry no labels"
	}
	slices.Sort(keys)
	if near, d := nearest(k, keys); d <= typoDistance(k) {
		return fmt.Sprintf("; did you mean %q?", near)
	}
	if len(keys) > 5 {
		return fmt.Sprintf("; the nodes carry %s and %d more", strings.Join(keys[:5], ", "), len(keys)-5)
	}
	return "; the nodes carry " + strings.Join(keys, ", ")
}
