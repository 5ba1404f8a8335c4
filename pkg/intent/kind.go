// Package intent owns what an operator declares: the intent kinds, how they
// are named and keyed, how intent files are parsed (Parse, ParseFiles) and
// the rules a set of intents must obey before it may become a revision
// (Validate).
//
// An intent is identified by (kind, name). Its kind is the spec that is set
// (Layer2Network, VRFRoute or RoutingTable). It is stored in the intents
// bucket under Key ("layer2network.tenant-a") and named in messages by ID
// ("layer2network/tenant-a").
//
// # Conflicts between intents
//
// Some values must be unique on a node: a VLAN, a VNI, a VRF route's
// (vrf, sequence) and a routing table id. The configurator does not know
// which nodes will exist, so it decides from the selectors alone, and
// conservatively: two selectors CAN select the same node unless some label
// key is required by both with different values. {zone: a} and {rack: 1}
// can share a node (one labelled zone=a, rack=1); {zone: a} and {zone: b}
// cannot; an empty selector shares a node with every other. A conflict is
// reported once per value, on the first intent by ID, counting the intents
// that claim it and naming the first few; it is found by sorting and
// grouping (O(n log n)), never by comparing every pair.
package intent

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Kind names, as written in intent files (`kind: Layer2Network`).
const (
	KindLayer2Network = "Layer2Network"
	KindVRFRoute      = "VRFRoute"
	KindRoutingTable  = "RoutingTable"
)

// Kinds lists every kind name in canonical order.
var Kinds = []string{KindLayer2Network, KindRoutingTable, KindVRFRoute}

// Kind returns the canonical kind name of in, or "" when no spec is set.
func Kind(in *sluicev1.Intent) string {
	switch in.GetSpec().(type) {
	case *sluicev1.Intent_Layer2Network:
		return KindLayer2Network
	case *sluicev1.Intent_VrfRoute:
		return KindVRFRoute
	case *sluicev1.Intent_RoutingTable:
		return KindRoutingTable
	}
	return ""
}

// KeyToken returns the lower-case token of a kind used in keys, subjects and
// IDs ("layer2network"); kind may be written in any case.
func KeyToken(kind string) string { return strings.ToLower(kind) }

// ParseKind returns the canonical name of kind s, written in any case
// ("layer2network", "Layer2Network"), or an error listing the valid kinds.
func ParseKind(s string) (string, error) {
	for _, k := range Kinds {
		if strings.EqualFold(s, k) {
			return k, nil
		}
	}
	if s == "" {
		return "", fmt.Errorf("kind is missing: use one of %s", strings.Join(Kinds, ", "))
	}
	return "", fmt.Errorf("unknown kind %q: use one of %s", s, strings.Join(Kinds, ", "))
}

// Key is the intents-bucket key of in: "<token>.<name>".
func Key(in *sluicev1.Intent) string { return KeyOf(Kind(in), in.GetName()) }

// KeyOf is the intents-bucket key of the intent of kind and name.
func KeyOf(kind, name string) string { return KeyToken(kind) + "." + name }

// ID names in in messages: "<token>/<name>".
func ID(in *sluicev1.Intent) string { return IDOf(Kind(in), in.GetName()) }

// IDOf names the intent of kind and name in messages.
func IDOf(kind, name string) string { return KeyToken(kind) + "/" + name }

// ParseKey splits an intents-bucket key into the canonical kind and the name.
func ParseKey(key string) (kind, name string, err error) {
	token, name, ok := strings.Cut(key, ".")
	if !ok || name == "" {
		return "", "", fmt.Errorf("intent key %q is not <kind>.<name>", key)
	}
	kind, err = ParseKind(token)
	if err != nil {
		return "", "", fmt.Errorf("intent key %q: %w", key, err)
	}
	return kind, name, nil
}

// Selector returns the node selector of in's spec; nil selects every node.
func Selector(in *sluicev1.Intent) *sluicev1.NodeSelector {
	switch s := in.GetSpec().(type) {
	case *sluicev1.Intent_Layer2Network:
		return s.Layer2Network.GetNodeSelector()
	case *sluicev1.Intent_VrfRoute:
		return s.VrfRoute.GetNodeSelector()
	case *sluicev1.Intent_RoutingTable:
		return s.RoutingTable.GetNodeSelector()
	}
	return nil
}

// WithSelector returns a copy of in with its spec's node selector set to
// sel (nil: every node).
func WithSelector(in *sluicev1.Intent, sel *sluicev1.NodeSelector) *sluicev1.Intent {
	out := WithoutSelector(in)
	if sel == nil {
		return out
	}
	switch s := out.GetSpec().(type) {
	case *sluicev1.Intent_Layer2Network:
		if s.Layer2Network != nil {
			s.Layer2Network.NodeSelector = sel
		}
	case *sluicev1.Intent_VrfRoute:
		if s.VrfRoute != nil {
			s.VrfRoute.NodeSelector = sel
		}
	case *sluicev1.Intent_RoutingTable:
		if s.RoutingTable != nil {
			s.RoutingTable.NodeSelector = sel
		}
	}
	return out
}

// WithoutSelector returns a copy of in with its spec's node selector removed:
// what a node receives once the selector has chosen it.
func WithoutSelector(in *sluicev1.Intent) *sluicev1.Intent {
	out := proto.Clone(in).(*sluicev1.Intent)
	switch s := out.GetSpec().(type) {
	case *sluicev1.Intent_Layer2Network:
		if s.Layer2Network != nil {
			s.Layer2Network.NodeSelector = nil
		}
	case *sluicev1.Intent_VrfRoute:
		if s.VrfRoute != nil {
			s.VrfRoute.NodeSelector = nil
		}
	case *sluicev1.Intent_RoutingTable:
		if s.RoutingTable != nil {
			s.RoutingTable.NodeSelector = nil
		}
	}
	return out
}
