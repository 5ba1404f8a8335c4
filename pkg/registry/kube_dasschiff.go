// das-schiff-network-operator's intent kinds, mapped field by field to
// sluice's (docs/registries.md, "Kubernetes", has the table):
//
//	Layer2NetworkConfiguration → Layer2Network
//	VRFRouteConfiguration      → VRFRoute
//
// The mapping is pure: an object's spec in, an intent and what could not be
// carried out. Three outcomes:
//
//   - a field that maps is carried (a value sluice's rules refuse, such as
//     VLAN 5000, is carried too: the configurator refuses it with its field
//     error, the intent's last valid version staying in force);
//   - a field sluice has no meaning for yet (anycastMac, routeTarget, ...),
//     or one no version of the kind has, is reported in the Document's Err
//     as ErrUnmapped and the intent goes ahead without it: leaving it out
//     never makes the intent reach more nodes or leak more routes;
//   - a field whose loss WOULD widen the intent (a nodeSelector's
//     matchExpressions, a prefix item whose action is deny) or a value of
//     the wrong type refuses the object: the Document has no intent and
//     names the field.

package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// DasSchiffGroup is the API group of das-schiff-network-operator's kinds.
const DasSchiffGroup = "network.t-caas.telekom.com"

// specReader reads the fields of one spec object, remembering which keys
// it consumed, which it found but cannot carry (unmapped) and the first
// problem that refuses the object.
type specReader struct {
	obj      map[string]any
	path     string // "spec", "spec.import[0]", ...
	used     map[string]bool
	unmapped *[]string
	err      error
}

func newSpecReader(obj map[string]any, path string, unmapped *[]string) *specReader {
	return &specReader{obj: obj, path: path, used: map[string]bool{}, unmapped: unmapped}
}

func (r *specReader) fail(key, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s.%s: %s", r.path, key, fmt.Sprintf(format, args...))
	}
}

// get returns the value of key, marking it consumed; nil when absent or null.
func (r *specReader) get(key string) any {
	r.used[key] = true
	return r.obj[key]
}

// uint reads an integer field into a uint32 (0 when absent). The range is
// the configurator's to check, except for what does not fit a uint32.
func (r *specReader) uint(key string) uint32 {
	v := r.get(key)
	if v == nil {
		return 0
	}
	n, ok := integer(v)
	if !ok {
		r.fail(key, "%s is not an integer", show(v))
		return 0
	}
	if n < 0 || n > math.MaxUint32 {
		r.fail(key, "%d is outside 0-4294967295", n)
		return 0
	}
	return uint32(n)
}

func (r *specReader) str(key string) string {
	v := r.get(key)
	if v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.fail(key, "%s is not a string", show(v))
	}
	return s
}

func (r *specReader) strings(key string) []string {
	v := r.get(key)
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		r.fail(key, "%s is not a list of strings", show(v))
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			r.fail(fmt.Sprintf("%s[%d]", key, i), "%s is not a string", show(e))
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (r *specReader) objects(key string) []map[string]any {
	v := r.get(key)
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		r.fail(key, "%s is not a list", show(v))
		return nil
	}
	out := make([]map[string]any, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			r.fail(fmt.Sprintf("%s[%d]", key, i), "%s is not an object", show(e))
			return nil
		}
		out = append(out, m)
	}
	return out
}

// unmappedIf consumes key and reports it when it holds anything but what
// sluice does anyway (absent, null, false, "", an empty list).
func (r *specReader) unmappedIf(key string) {
	switch v := r.get(key).(type) {
	case nil:
	case bool:
		if v {
			*r.unmapped = append(*r.unmapped, r.path+"."+key)
		}
	case string:
		if v != "" {
			*r.unmapped = append(*r.unmapped, r.path+"."+key)
		}
	case []any:
		if len(v) > 0 {
			*r.unmapped = append(*r.unmapped, r.path+"."+key)
		}
	default:
		*r.unmapped = append(*r.unmapped, r.path+"."+key)
	}
}

// rest reports every key not consumed: fields of no version of the kind
// that sluice knows.
func (r *specReader) rest() {
	for _, k := range sortedKeys(r.obj) {
		if !r.used[k] {
			*r.unmapped = append(*r.unmapped, r.path+"."+k)
		}
	}
}

// selector maps a metav1.LabelSelector: matchLabels only. matchExpressions
// refuse the object: without them the intent would select more nodes.
func (r *specReader) selector(key string) *sluicev1.NodeSelector {
	v := r.get(key)
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		r.fail(key, "%s is not a label selector", show(v))
		return nil
	}
	sel := newSpecReader(m, r.path+"."+key, r.unmapped)
	if exprs := sel.get("matchExpressions"); exprs != nil {
		if list, ok := exprs.([]any); !ok || len(list) > 0 {
			r.fail(key+".matchExpressions", "sluice selects nodes by matchLabels only, and without these expressions the intent would reach more nodes; write them as matchLabels")
			return nil
		}
	}
	var out *sluicev1.NodeSelector
	if labels := sel.get("matchLabels"); labels != nil {
		lm, ok := labels.(map[string]any)
		if !ok {
			r.fail(key+".matchLabels", "%s is not a map of label to value", show(labels))
			return nil
		}
		out = &sluicev1.NodeSelector{MatchLabels: map[string]string{}}
		for _, k := range sortedKeys(lm) {
			s, ok := lm[k].(string)
			if !ok {
				r.fail(key+".matchLabels."+k, "%s is not a string", show(lm[k]))
				return nil
			}
			out.MatchLabels[k] = s
		}
	}
	sel.rest()
	if sel.err != nil && r.err == nil {
		r.err = sel.err
	}
	return out
}

// mapLayer2NetworkConfiguration maps a Layer2NetworkConfiguration's spec.
func mapLayer2NetworkConfiguration(spec map[string]any) (*sluicev1.Layer2Network, []string, error) {
	var unmapped []string
	r := newSpecReader(spec, "spec", &unmapped)
	l := &sluicev1.Layer2Network{
		Vlan:            r.uint("id"),
		Mtu:             r.uint("mtu"),
		Vni:             r.uint("vni"),
		AnycastGateways: r.strings("anycastGateways"),
		Vrf:             r.str("vrf"),
		NodeSelector:    r.selector("nodeSelector"),
	}
	for _, k := range []string{"anycastMac", "advertiseNeighbors", "createMacVLANInterface", "neighSuppression"} {
		r.unmappedIf(k)
	}
	r.rest()
	if r.err != nil {
		return nil, nil, r.err
	}
	return l, unmapped, nil
}

// mapVRFRouteConfiguration maps a VRFRouteConfiguration's spec.
func mapVRFRouteConfiguration(spec map[string]any) (*sluicev1.VRFRoute, []string, error) {
	var unmapped []string
	r := newSpecReader(spec, "spec", &unmapped)
	v := &sluicev1.VRFRoute{
		Vrf:          r.str("vrf"),
		Sequence:     r.uint("seq"),
		Community:    r.str("community"),
		NodeSelector: r.selector("nodeSelector"),
	}
	for _, list := range []struct {
		key string
		out *[]*sluicev1.PrefixItem
	}{{"import", &v.Import}, {"export", &v.Export}} {
		for i, m := range r.objects(list.key) {
			item := newSpecReader(m, fmt.Sprintf("spec.%s[%d]", list.key, i), &unmapped)
			p := &sluicev1.PrefixItem{Cidr: item.str("cidr"), Ge: item.uint("ge"), Le: item.uint("le")}
			// seq orders the generated prefix list; with permit entries
			// only (deny is refused) the order never changes what matches.
			item.uint("seq")
			if a := item.str("action"); a != "permit" && item.err == nil {
				item.fail("action", "%s: sluice leaks the prefixes a VRFRoute lists (permit); without a deny entry more routes would leak, so the object is not taken", show(a))
			}
			item.rest()
			if item.err != nil && r.err == nil {
				r.err = item.err
			}
			*list.out = append(*list.out, p)
		}
	}
	for _, k := range []string{"routeTarget", "vni", "aggregate", "sbrPrefixes", "loopbacks"} {
		r.unmappedIf(k)
	}
	r.rest()
	if r.err != nil {
		return nil, nil, r.err
	}
	return v, unmapped, nil
}

// unmappedError is a Document's Err for the fields not carried, or nil.
func unmappedError(fields []string) error {
	if len(fields) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", strings.Join(slices.Compact(slices.Sorted(slices.Values(fields))), ", "), ErrUnmapped)
}

// integer reads a JSON number as decoded by the dynamic client (int64) or
// encoding/json (float64, json.Number).
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case float64:
		if n != math.Trunc(n) || n < math.MinInt64 || n > math.MaxInt64 {
			return 0, false
		}
		return int64(n), true
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// show is a value as JSON, cut short, for an error.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// sortedKeys is m's keys in order: reports never follow map order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
