package dashboard

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// compactFleet is nodes as the stream sends them: column by column, each
// repeated string once in a table and referred to by its index. It carries
// what the map and the node list show (name, present, phase, revision,
// rollout, the group-by labels and the node's category in the rollout
// shown: place.go); the drawer reads a node's whole object
// from GET /api/v1/nodes/{name}. At 100,000 nodes it is a few megabytes,
// where every node's full object is about 56 (TestSnapshot_100000Nodes).
//
// Row i is the node names[i]: present[i] is '1' or '0'; phase, revision,
// rollout, domain and state index phases, revisions, rollouts, domains and
// states (0 is "" / no labels); domains[k] holds the group-by labels' values, in
// groupBy order ("" for a missing label).
type compactFleet struct {
	GroupBy   []string   `json:"groupBy"`
	Names     []string   `json:"names"`
	Present   string     `json:"present"`
	Phase     []int      `json:"phase"`
	Revision  []int      `json:"revision"`
	Rollout   []int      `json:"rollout"`
	Domain    []int      `json:"domain"`
	State     []int      `json:"state"`
	Phases    []string   `json:"phases"`
	Revisions []string   `json:"revisions"`
	Rollouts  []string   `json:"rollouts"`
	Domains   [][]string `json:"domains"`
	States    []string   `json:"states"` // contract's category keys (contract.Place)
}

// table numbers strings in order of first use; index 0 is "".
type table struct {
	index map[string]int
	list  []string
}

func newTable() *table { return &table{index: map[string]int{"": 0}, list: []string{""}} }

func (t *table) of(s string) int {
	if i, ok := t.index[s]; ok {
		return i
	}
	t.index[s] = len(t.list)
	t.list = append(t.list, s)
	return len(t.list) - 1
}

// compact encodes nodes, each with its category (category(name)); a node
// without a presence takes its domain from departed (the labels its
// presence had when it went), if there, else from its status (the labels
// its agent had when it last wrote it: a node that left before this
// dashboard started).
func compact(nodes []view.Node, groupBy []string, category func(name string) string, departed map[string]map[string]string) *compactFleet {
	f := &compactFleet{GroupBy: groupBy, Names: make([]string, 0, len(nodes)),
		Phase: make([]int, 0, len(nodes)), Revision: make([]int, 0, len(nodes)), Rollout: make([]int, 0, len(nodes)), Domain: make([]int, 0, len(nodes)),
		State: make([]int, 0, len(nodes))}
	phases, revs, rollouts, domains, states := newTable(), newTable(), newTable(), newTable(), newTable()
	var present strings.Builder
	values := make([]string, len(groupBy))
	for _, n := range nodes {
		f.Names = append(f.Names, n.Name)
		if n.Presence != nil {
			present.WriteByte('1')
		} else {
			present.WriteByte('0')
		}
		phase := ""
		if n.Status != nil {
			phase = n.Status.GetPhase().String()
		}
		f.Phase = append(f.Phase, phases.of(phase))
		f.Revision = append(f.Revision, revs.of(n.Revision()))
		f.Rollout = append(f.Rollout, rollouts.of(n.Status.GetRollout()))
		f.State = append(f.State, states.of(category(n.Name)))
		key := ""
		labels, known := departed[n.Name]
		switch {
		case n.Presence != nil:
			labels, known = n.Presence.GetLabels(), true
		case !known && len(n.Status.GetNodeLabels()) > 0:
			labels, known = n.Status.GetNodeLabels(), true
		}
		if known {
			for i, k := range groupBy {
				values[i] = labels[k]
			}
			key = strings.Join(values, "\x00")
			if strings.Trim(key, "\x00") == "" {
				key = ""
			}
		}
		f.Domain = append(f.Domain, domains.of(key))
	}
	f.Present = present.String()
	f.Phases, f.Revisions, f.Rollouts, f.States = phases.list, revs.list, rollouts.list, states.list
	for _, key := range domains.list {
		if key == "" {
			f.Domains = append(f.Domains, []string{})
			continue
		}
		f.Domains = append(f.Domains, strings.Split(key, "\x00"))
	}
	return f
}

// coordinatorView is the coordinator panel: who leads, in which term, since
// when (the term's start is the last takeover), how the lease runs out,
// the term before when this dashboard saw it end, and the coordinator
// instances (leader and standbys) as sluice get pause lists them.
type coordinatorView struct {
	Lease json.RawMessage `json:"lease"` // the stored LeaderLease, {} when none is held
	// LeaseTTL is the leases bucket's TTL: the server removes the lease
	// one TTL after its last renewal, so the holder is gone by then.
	LeaseTTL string `json:"leaseTTL,omitempty"`
	// Renew is how often a leader renews (a quarter of the lease).
	Renew string `json:"renew,omitempty"`
	// Ended says how the last lease ended while none is held: "expired"
	// (the server's TTL) or "released" (its holder stopped), and when.
	Ended   string          `json:"ended,omitempty"`
	EndedAt *time.Time      `json:"endedAt,omitempty"`
	Before  json.RawMessage `json:"before,omitempty"` // the previous term's lease, when seen
	// Instances are the coordinator's instance records (role leader or standby).
	Instances []json.RawMessage `json:"instances"`
}

// coordinator is the coordinator panel; the caller holds mu.
func (s *state) coordinator() (*coordinatorView, error) {
	c := &coordinatorView{Instances: []json.RawMessage{}}
	var err error
	if c.Lease, err = s.leaderJSON(); err != nil {
		return nil, err
	}
	if s.leaseTTL > 0 {
		c.LeaseTTL, c.Renew = s.leaseTTL.String(), (s.leaseTTL / 4).String()
	}
	if s.leader == nil && s.leaseEnd != nil {
		c.Ended, c.EndedAt = "released", &s.leaseEnd.at
		if s.leaseEnd.expired {
			c.Ended = "expired"
		}
	}
	before := s.lastTerm
	if s.leader == nil {
		before = s.leaseEndTerm
	}
	if before != nil {
		if c.Before, err = view.JSON(before); err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.instances)) {
		if in := s.instances[k]; in.GetComponent() == contract.ComponentCoordinator {
			b, err := view.JSON(in)
			if err != nil {
				return nil, err
			}
			c.Instances = append(c.Instances, b)
		}
	}
	return c, nil
}

// freezeList is `sluice get freezes -o json`'s items: every freeze, by start.
func (s *state) freezeList() ([]json.RawMessage, error) {
	fs := slices.Collect(maps.Values(s.freezes))
	slices.SortFunc(fs, func(a, b *sluicev1.Freeze) int {
		if c := a.GetFrom().AsTime().Compare(b.GetFrom().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	out, err := view.ProtoObjects(fs)
	if out == nil {
		out = []json.RawMessage{}
	}
	return out, err
}

// registryList is every registry's status as the configurator wrote it
// (the status of each item of `sluice get registries -o json`: state, last
// sync, marked and pending deletions, a held deletion), by name.
func (s *state) registryList() ([]json.RawMessage, error) {
	rs := make([]*sluicev1.RegistryStatus, 0, len(s.registries))
	for _, k := range slices.Sorted(maps.Keys(s.registries)) {
		rs = append(rs, s.registries[k])
	}
	out, err := view.ProtoObjects(rs)
	if out == nil {
		out = []json.RawMessage{}
	}
	return out, err
}

// timelines is the plan against the actual of each rollout at now.
func timelines(rs []*sluicev1.Rollout, now time.Time) []view.Timeline {
	out := make([]view.Timeline, 0, len(rs))
	for _, r := range rs {
		out = append(out, view.RolloutTimeline(r, now))
	}
	return out
}
