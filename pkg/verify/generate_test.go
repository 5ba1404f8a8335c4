package verify_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// world is a generated intent set, fleet and strategy that break no rule:
// every network is in one zone, some carried in a second zone as the same
// network (same VNI, VLAN, MTU, gateways and VRF), every VRF is named by
// its network and its VRF route, every value is unique fleet-wide.
type world struct {
	r        *rand.Rand
	zones    []string
	nets     []*sluicev1.Intent            // with a zone selector each
	carried  map[*sluicev1.Intent][]string // the zones each of nets is carried in
	intents  []*sluicev1.Intent
	nodes    []verify.Node
	strategy *sluicev1.Strategy
	next     uint32 // the next fresh number
}

func (w *world) fresh() uint32 { w.next++; return w.next }

func zoneSel(z string) *sluicev1.NodeSelector {
	return &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": z}}
}

func generate(seed uint64) *world {
	w := &world{r: rand.New(rand.NewPCG(seed, 41)), next: 100, carried: map[*sluicev1.Intent][]string{}}
	nz := 3 + w.r.IntN(2) // a network is carried in up to two: a third is free
	for i := range nz {
		w.zones = append(w.zones, fmt.Sprintf("zone-%c", 'a'+i))
	}
	for _, z := range w.zones {
		for i := range 1 + w.r.IntN(5) {
			w.nodes = append(w.nodes, verify.Node{Name: fmt.Sprintf("%s-n%d", z, i), Labels: map[string]string{"zone": z, "rack": fmt.Sprintf("%s-r%d", z, i%2)}})
		}
	}
	for i := range 2 + w.r.IntN(10) {
		vrf := fmt.Sprintf("tenant-%d", i)
		z := w.zones[w.r.IntN(nz)]
		mtu := []uint32{0, 1500, 9000}[w.r.IntN(3)]
		n := l2(fmt.Sprintf("net-%d", i), w.fresh(), 10000+w.fresh(), mtu, vrf, []string{fmt.Sprintf("10.%d.%d.1/24", i/200, i%200)}, zoneSel(z))
		w.nets = append(w.nets, n)
		w.intents = append(w.intents, n)
		w.carried[n] = []string{z}
		if w.r.IntN(3) == 0 {
			// The same network carried in another zone too.
			other := w.zones[(slices.Index(w.zones, z)+1)%nz]
			c := l2(fmt.Sprintf("net-%d-again", i), n.GetLayer2Network().GetVlan(), n.GetLayer2Network().GetVni(), mtu, vrf, n.GetLayer2Network().GetAnycastGateways(), zoneSel(other))
			w.intents = append(w.intents, c)
			w.carried[n] = append(w.carried[n], other)
		}
		w.intents = append(w.intents, route(vrf, vrf, 10, []string{"10.255.0.0/16"}, []string{fmt.Sprintf("10.%d.%d.0/24", i/200, i%200)}, fmt.Sprintf("65000:%d", i), zoneSel(z)))
	}
	for i := range w.r.IntN(4) {
		w.intents = append(w.intents, table(fmt.Sprintf("table-%d", i), w.fresh(), zoneSel(w.zones[w.r.IntN(nz)])))
	}
	w.strategy = &sluicev1.Strategy{FailureDomain: []string{"", "zone", "rack"}[w.r.IntN(3)],
		FirstWave: uint32(w.r.IntN(len(w.nodes) + 1)), MaxParallel: fmt.Sprint(1 + w.r.IntN(len(w.nodes)))}
	return w
}

// pick is a random network and a zone it is not carried in.
func (w *world) pick() (*sluicev1.Intent, *sluicev1.Layer2Network, string) {
	n := w.nets[w.r.IntN(len(w.nets))]
	var others []string
	for _, o := range w.zones {
		if !slices.Contains(w.carried[n], o) {
			others = append(others, o)
		}
	}
	return n, n.GetLayer2Network(), others[w.r.IntN(len(others))]
}

// plant breaks rule in w, on purpose and nothing else.
func (w *world) plant(rule string) {
	add := func(in *sluicev1.Intent) { w.intents = append(w.intents, in) }
	switch rule {
	case verify.RuleVNIVLAN:
		_, s, z := w.pick()
		add(l2("planted", w.fresh(), s.GetVni(), s.GetMtu(), s.GetVrf(), s.GetAnycastGateways(), zoneSel(z)))
	case verify.RuleVNIMTU:
		_, s, z := w.pick()
		add(l2("planted", s.GetVlan(), s.GetVni(), 9100, s.GetVrf(), s.GetAnycastGateways(), zoneSel(z)))
	case verify.RuleVNIGateways:
		_, s, z := w.pick()
		add(l2("planted", s.GetVlan(), s.GetVni(), s.GetMtu(), s.GetVrf(), []string{fmt.Sprintf("172.16.%d.1/24", w.fresh()%250)}, zoneSel(z)))
	case verify.RuleVNIVRF:
		_, s, z := w.pick()
		other := w.nets[(slices.IndexFunc(w.nets, func(in *sluicev1.Intent) bool { return in.GetLayer2Network() == s })+1)%len(w.nets)].GetLayer2Network().GetVrf()
		add(l2("planted", s.GetVlan(), s.GetVni(), s.GetMtu(), other, s.GetAnycastGateways(), zoneSel(z)))
	case verify.RuleVLANVNIs:
		_, s, z := w.pick()
		add(l2("planted", s.GetVlan(), 10000+w.fresh(), 0, "", nil, zoneSel(z)))
	case verify.RuleGatewayShared:
		_, s, z := w.pick()
		add(l2("planted", w.fresh(), 10000+w.fresh(), 0, s.GetVrf(), s.GetAnycastGateways(), zoneSel(z)))
	case verify.RuleVRFUnknown:
		_, s, _ := w.pick()
		add(route("planted", s.GetVrf()+"x", 10, nil, []string{"192.168.0.0/24"}, "", nil))
	case verify.RuleTableShared:
		_, _, z := w.pick()
		add(table("planted-a", 7, zoneSel(z)))
		add(table("planted-b", 7, zoneSel(w.zones[(slices.Index(w.zones, z)+1)%len(w.zones)])))
	case verify.RuleVRFTableCollision:
		// vrf-556 and vrf-1960 hash to one slot (contract.VRFTableSlot).
		_, _, z := w.pick()
		add(l2("planted-a", w.fresh(), 10000+w.fresh(), 0, "vrf-556", []string{"172.17.0.1/24"}, zoneSel(z)))
		add(l2("planted-b", w.fresh(), 10000+w.fresh(), 0, "vrf-1960", []string{"172.17.1.1/24"}, nil))
		add(route("planted-a", "vrf-556", 10, nil, nil, "", nil)) // each VRF named twice: no vrf-unknown
		add(route("planted-b", "vrf-1960", 10, nil, nil, "", nil))
	case verify.RuleLeakCycle:
		a, _, _ := w.pick()
		b := w.nets[(slices.Index(w.nets, a)+1)%len(w.nets)]
		for _, n := range []*sluicev1.Intent{a, b} {
			vrf := n.GetLayer2Network().GetVrf()
			add(route("planted-"+vrf, vrf, 20, []string{"192.168.1.0/24"}, []string{"192.168.1.0/24"}, "", nil))
		}
	case verify.RuleExportCommunities:
		a, _, _ := w.pick()
		vrf := a.GetLayer2Network().GetVrf()
		add(route("planted-1", vrf, 21, nil, []string{"192.168.2.0/24"}, "65001:1", nil))
		add(route("planted-2", vrf, 22, nil, []string{"192.168.2.0/24"}, "65001:2", nil))
	case verify.RuleDomainMissing:
		w.strategy.FailureDomain = "zonee"
	case verify.RuleDomainPartial:
		w.strategy.FailureDomain = "zone"
		w.nodes = append(w.nodes, verify.Node{Name: "bare", Labels: map[string]string{"rack": "x"}})
	case verify.RuleStrategyExceeds:
		w.strategy.FirstWave = uint32(len(w.nodes) + 1 + w.r.IntN(10))
	default:
		panic("no planting for " + rule)
	}
}

func (w *world) verify(t *testing.T, seed uint64, what string) []*sluicev1.Finding {
	t.Helper()
	if errs := intent.Validate(w.intents); len(errs) > 0 {
		t.Fatalf("seed %d (%s): the generated set breaks a per-node rule, so it tests nothing fleet-wide: %v", seed, what, errs)
	}
	return verify.Verify(verify.Input{Intents: w.intents, Nodes: w.nodes, Strategy: w.strategy})
}

// On 1,000 seeds: a generated clean set has no finding, and the same set
// with one rule's violation planted has that rule's finding and no other.
func TestVerify_GeneratedWorlds_FindEveryPlantedViolationAndNothingOnCleanSets(t *testing.T) {
	const seeds = 1000
	found := map[string]int{}
	for seed := range uint64(seeds) {
		w := generate(seed)
		if fs := w.verify(t, seed, "clean"); len(fs) > 0 {
			t.Fatalf("seed %d: the clean set has findings:\n%s", seed, formatAll(fs))
		}
		rule := verify.Rules[seed%uint64(len(verify.Rules))].ID
		w.plant(rule)
		fs := w.verify(t, seed, "planted "+rule)
		var rules []string
		for _, f := range fs {
			rules = append(rules, f.GetRule())
		}
		if len(rules) == 0 || slices.ContainsFunc(rules, func(r string) bool { return r != rule }) {
			t.Fatalf("seed %d: planted %s, found %v:\n%s", seed, rule, rules, formatAll(fs))
		}
		found[rule]++
	}
	for _, r := range verify.Rules {
		if found[r.ID] < seeds/len(verify.Rules) {
			t.Errorf("rule %s was planted and found %d times, want at least %d", r.ID, found[r.ID], seeds/len(verify.Rules))
		}
	}
	t.Logf("%d clean sets: 0 findings; %d planted violations, each found alone: %v", seeds, seeds, found)
}
