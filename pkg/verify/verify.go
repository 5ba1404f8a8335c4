// Package verify is the fleet verifier: the one home of the rules that hold
// for a whole intent set on a whole fleet, which no check of one intent or
// one node can see. A VNI is one network across the fabric whichever nodes
// carry it; a VRF that one intent names and nothing else does is likely a
// typo; a failure-domain label no node carries turns "one zone at a time"
// into "everything at once".
//
// Entry point: Verify(Input) returns the findings, each with a stable rule
// id (Rules lists them, docs/intents.md "Fleet rules" explains them), a
// severity (an error refuses the apply; a warning is shown, and refuses
// only when asked to be strict), the intents concerned, up to three example
// nodes and a one-line fix.
//
// It is pure: no clock, no I/O, and no map-order dependence (every list is
// sorted). Its input is assumed to have passed intent.Validate; a value that
// rule refuses (a malformed gateway, say) is skipped here, not reported
// twice.
//
// Cost: every rule groups intents by the value it is about (a VNI, a VLAN,
// a VRF name, a prefix), so the work is O(n log n) in intents, never one
// check per pair of them; nodes are grouped by their label set first, so
// selecting is per distinct label set, not per node (fleet.go).
package verify

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Rule ids: stable names of the rules, as findings and docs carry them.
const (
	RuleVNIVLAN           = "vni-vlan-mismatch"
	RuleVNIMTU            = "vni-mtu-mismatch"
	RuleVNIGateways       = "vni-gateway-mismatch"
	RuleVNIVRF            = "vni-vrf-mismatch"
	RuleVLANVNIs          = "vlan-multiple-vnis"
	RuleGatewayShared     = "gateway-shared"
	RuleVRFUnknown        = "vrf-unknown"
	RuleTableShared       = "table-shared"
	RuleVRFTableCollision = "vrf-table-collision"
	RuleLeakCycle         = "leak-cycle"
	RuleExportCommunities = "export-community-conflict"
	RuleDomainMissing     = "failure-domain-missing"
	RuleDomainPartial     = "failure-domain-partial"
	RuleStrategyExceeds   = "strategy-exceeds-fleet"
)

// Rule is one rule of the verifier: its id and severity.
type Rule struct {
	ID       string
	Severity sluicev1.Severity
}

// Rules lists every rule, in the order docs/intents.md lists them.
var Rules = []Rule{
	{RuleVNIVLAN, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVNIMTU, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVNIGateways, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVNIVRF, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVLANVNIs, sluicev1.Severity_SEVERITY_WARNING},
	{RuleGatewayShared, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVRFUnknown, sluicev1.Severity_SEVERITY_WARNING},
	{RuleTableShared, sluicev1.Severity_SEVERITY_ERROR},
	{RuleVRFTableCollision, sluicev1.Severity_SEVERITY_ERROR},
	{RuleLeakCycle, sluicev1.Severity_SEVERITY_WARNING},
	{RuleExportCommunities, sluicev1.Severity_SEVERITY_WARNING},
	{RuleDomainMissing, sluicev1.Severity_SEVERITY_ERROR},
	{RuleDomainPartial, sluicev1.Severity_SEVERITY_WARNING},
	{RuleStrategyExceeds, sluicev1.Severity_SEVERITY_WARNING},
}

// severityOf is each rule's severity, by id.
var severityOf = func() map[string]sluicev1.Severity {
	m := make(map[string]sluicev1.Severity, len(Rules))
	for _, r := range Rules {
		m[r.ID] = r.Severity
	}
	return m
}()

// Node is a present node: its name and labels.
type Node struct {
	Name   string
	Labels map[string]string
}

// Input is what the verifier checks: the effective intent set a revision
// would hold, the nodes present now, and the strategy it would be rolled
// out with (nil: the defaults; the strategy rules then say nothing).
type Input struct {
	Intents  []*sluicev1.Intent
	Nodes    []Node
	Strategy *sluicev1.Strategy
}

// intentsShown is how many intents a finding lists; its message counts them all.
const intentsShown = 5

// Verify checks in against every rule and returns the findings, errors
// first, then by rule id and the first intent named; nil when clean.
func Verify(in Input) []*sluicev1.Finding {
	v := &verifier{fleet: newFleet(in.Nodes)}
	v.layer2(in.Intents)
	v.vrfs(in.Intents)
	v.strategy(in.Strategy)
	slices.SortFunc(v.out, func(a, b *sluicev1.Finding) int {
		return cmp.Or(cmp.Compare(a.GetSeverity(), b.GetSeverity()), cmp.Compare(a.GetRule(), b.GetRule()),
			cmp.Compare(first(a.GetIntents()), first(b.GetIntents())), cmp.Compare(a.GetMessage(), b.GetMessage()))
	})
	return v.out
}

// Errors is how many of fs are errors.
func Errors(fs []*sluicev1.Finding) int {
	n := 0
	for _, f := range fs {
		if f.GetSeverity() == sluicev1.Severity_SEVERITY_ERROR {
			n++
		}
	}
	return n
}

// Refuses reports whether fs refuse an apply: an error does, and with
// strict a warning does too.
func Refuses(fs []*sluicev1.Finding, strict bool) bool {
	if strict {
		return len(fs) > 0
	}
	return Errors(fs) > 0
}

// Format renders f for people on one line: "error vni-vlan-mismatch:
// MESSAGE (nodes: a, b, c and 7 more); fix: FIX".
func Format(f *sluicev1.Finding) string {
	var b strings.Builder
	b.WriteString(SeverityWord(f.GetSeverity()))
	b.WriteString(" ")
	b.WriteString(f.GetRule())
	b.WriteString(": ")
	b.WriteString(f.GetMessage())
	if len(f.GetNodes()) > 0 {
		fmt.Fprintf(&b, " (nodes: %s", strings.Join(f.GetNodes(), ", "))
		if more := int(f.GetNodeCount()) - len(f.GetNodes()); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
		b.WriteString(")")
	}
	if f.GetFix() != "" {
		b.WriteString("; fix: ")
		b.WriteString(f.GetFix())
	}
	return b.String()
}

// SeverityWord is "error" or "warning".
func SeverityWord(s sluicev1.Severity) string {
	if s == sluicev1.Severity_SEVERITY_ERROR {
		return "error"
	}
	return "warning"
}

type verifier struct {
	fleet *fleet
	out   []*sluicev1.Finding
}

// add records a finding of rule about intents (their nodes are the example
// nodes), with a message and a fix.
func (v *verifier) add(rule string, intents []*sluicev1.Intent, message, fix string) {
	names, count := v.fleet.reach(intents)
	v.addNodes(rule, intents, names, count, message, fix)
}

// addNodes is add with the nodes concerned given.
func (v *verifier) addNodes(rule string, intents []*sluicev1.Intent, names []string, count int, message, fix string) {
	ids := idsOf(intents)
	if len(ids) > intentsShown {
		ids = ids[:intentsShown]
	}
	v.out = append(v.out, &sluicev1.Finding{Rule: rule, Severity: severityOf[rule], Intents: ids,
		Nodes: names, NodeCount: uint32(count), Message: message, Fix: fix})
}

// idsOf are the sorted, distinct ids of ins.
func idsOf(ins []*sluicev1.Intent) []string {
	ids := make([]string, 0, len(ins))
	for _, in := range ins {
		ids = append(ids, intent.ID(in))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// listIDs names up to intentsShown of ins, "(+N more)" for the rest.
func listIDs(ins []*sluicev1.Intent) string {
	ids := idsOf(ins)
	if len(ids) <= intentsShown {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(ids[:intentsShown], ", "), len(ids)-intentsShown)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// groupBy groups items by key, groups in key order, items in input order.
func groupBy[T any](items []T, key func(T) string) [][]T {
	idx := map[string]int{}
	var keys []string
	var groups [][]T
	for _, it := range items {
		k := key(it)
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			keys = append(keys, k)
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], it)
	}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	out := make([][]T, len(groups))
	for i, o := range order {
		out[i] = groups[o]
	}
	return out
}
