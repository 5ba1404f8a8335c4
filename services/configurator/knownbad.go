package configurator

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// maxRefusedListed bounds the nodes a refusal names (it says how many more).
const maxRefusedListed = 10

// refuseKnownBad refuses, before anything is stored, a revision whose
// rollout the coordinator would refuse: a present node would get a
// fingerprint recorded invalid. The answer names each such node, its
// fingerprint and why it is known bad. Strategy retryInvalid skips the check
// (the coordinator then forgets those fingerprints on purpose). The
// coordinator checks again before touching any node: this check is for the
// operator, who should hear "no" now rather than read it in a rollout record.
func (s *Service) refuseKnownBad(ctx context.Context, rev *sluicev1.Revision, st *sluicev1.Strategy) error {
	if st.GetRetryInvalid() {
		return nil
	}
	bad, err := s.st.invalid.List(ctx, ">")
	if err != nil {
		return unavailable(fmt.Errorf("read the invalid fingerprints: %w", err))
	}
	known := map[string]*sluicev1.InvalidFingerprint{}
	for _, e := range bad {
		if e.Err == nil && !contract.IsControlKey(e.Key) && e.Value.GetForgiven() == nil {
			known[e.Key] = e.Value
		}
	}
	if len(known) == 0 {
		return nil
	}
	nodes, err := s.st.nodes.List(ctx, ">")
	if err != nil {
		return unavailable(fmt.Errorf("read the nodes: %w", err))
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Key < nodes[j].Key })
	var hits []string
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		fp := render.Fingerprint(render.NodeConfig(rev, n.Value.GetLabels()))
		f := known[fp]
		if f == nil {
			continue
		}
		if len(hits) < maxRefusedListed {
			hits = append(hits, fmt.Sprintf("%s → %s (%s on %s in rollout %s, check %s: %s)", n.Key, render.Short(fp),
				orDefault(f.GetCause(), "check-failed"), orDefault(f.GetNode(), "?"), orDefault(f.GetRollout(), "?"),
				orDefault(f.GetCheck(), "?"), oneLine(f.GetOutput(), 120)))
		} else {
			hits = append(hits, "")
		}
	}
	if len(hits) == 0 {
		return nil
	}
	listed := hits[:min(len(hits), maxRefusedListed)]
	more := ""
	if n := len(hits) - len(listed); n > 0 {
		more = fmt.Sprintf("; and %d more", n)
	}
	return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf(
		"refused: revision %s would give %d node(s) a config recorded invalid: %s%s; nothing was stored. "+
			"Fix the intents, or apply with --retry-invalid to roll it out again on purpose (sluice get fingerprints shows why each failed)",
		render.Short(rev.GetId()), len(hits), strings.Join(listed, "; "), more)}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
