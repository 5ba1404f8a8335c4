package intent

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Value ranges.
const (
	MinVLAN, MaxVLAN         = 1, 4094
	MinVNI, MaxVNI           = 1, 1<<24 - 1
	MinMTU, MaxMTU           = 1000, 9216
	DefaultMTU               = 1500
	MinSequence, MaxSequence = 1, 65535
)

// reservedTables are the kernel's own routing tables.
var reservedTables = map[uint32]string{253: "default", 254: "main", 255: "local"}

// Validate checks a whole set of intents — the effective set a revision
// would hold, or a batch on its own — and returns every problem, sorted by
// intent, field and rule; nil means valid. Besides each intent's own rules
// it reports a (kind, name) given twice and values that must be unique on a
// node but are shared by intents whose selectors can select the same node
// (see the package doc).
func Validate(intents []*sluicev1.Intent) []*sluicev1.FieldError {
	return validate(intents, nil)
}

// ValidateChanging is Validate of set, the whole set an apply of batch
// would produce (the stored intents with batch applied), reporting a value
// claimed by both a stored intent and one of batch on batch's (the first
// of them in order): the error names the intent the apply changes, which
// the applied files declare, so the CLI can point at its line.
func ValidateChanging(set, batch []*sluicev1.Intent) []*sluicev1.FieldError {
	changing := make(map[string]bool, len(batch))
	for _, in := range batch {
		changing[displayID(in)] = true
	}
	return validate(set, changing)
}

func validate(intents []*sluicev1.Intent, changing map[string]bool) []*sluicev1.FieldError {
	c := &checker{changing: changing}
	seen := map[string]int{}
	var unique []*sluicev1.Intent
	for _, in := range intents {
		id := displayID(in)
		seen[id]++
		if seen[id] == 1 {
			unique = append(unique, in)
		}
	}
	for _, id := range sortedKeys(seen) {
		if n := seen[id]; n > 1 {
			c.add(id, "name", "%s is given %d times; each kind and name may appear once", id, n)
		}
	}
	for _, in := range unique {
		c.intent(in)
	}
	c.conflicts(unique)
	SortFieldErrors(c.errs)
	return c.errs
}

// SortFieldErrors sorts errs by intent, field and rule.
func SortFieldErrors(errs []*sluicev1.FieldError) {
	slices.SortFunc(errs, func(a, b *sluicev1.FieldError) int {
		return cmp.Or(cmp.Compare(a.GetIntent(), b.GetIntent()),
			cmp.Compare(a.GetField(), b.GetField()), cmp.Compare(a.GetRule(), b.GetRule()))
	})
}

// FormatFieldError renders fe for people: "layer2network/a: spec.vlan: 5000
// is outside 1-4094". Control characters in it (a name a registry or an
// older release let through), newlines included, are escaped
// (contract.EscapeLine): it is printed to terminals as one line.
func FormatFieldError(fe *sluicev1.FieldError) string {
	var parts []string
	for _, p := range []string{fe.GetIntent(), fe.GetField(), fe.GetRule()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return contract.EscapeLine(strings.Join(parts, ": "))
}

// displayID is ID, or the bare name when the intent has no kind; a name
// that is not printable text is quoted (contract.Quote), so that the
// errors naming the intent show it as visible text.
func displayID(in *sluicev1.Intent) string {
	name := contract.Quote(in.GetName())
	if Kind(in) == "" {
		return name
	}
	return IDOf(Kind(in), name)
}

type checker struct {
	errs     []*sluicev1.FieldError
	changing map[string]bool // the intents a conflict is reported on first (ValidateChanging)
}

func (c *checker) add(id, field, format string, args ...any) {
	c.errs = append(c.errs, &sluicev1.FieldError{Intent: id, Field: field, Rule: fmt.Sprintf(format, args...)})
}

// intent checks the rules of one intent on its own.
func (c *checker) intent(in *sluicev1.Intent) {
	id := displayID(in)
	if err := contract.ValidName(in.GetName()); err != nil {
		c.add(id, "name", "%v", err)
	}
	switch s := in.GetSpec().(type) {
	case *sluicev1.Intent_Layer2Network:
		c.layer2(id, s.Layer2Network)
	case *sluicev1.Intent_VrfRoute:
		c.vrfRoute(id, s.VrfRoute)
	case *sluicev1.Intent_RoutingTable:
		c.routingTable(id, s.RoutingTable)
	default:
		c.add(id, "spec", "no spec is set: an intent needs one of layer2Network, vrfRoute or routingTable")
	}
}

func (c *checker) rangeCheck(id, field, what string, v, lo, hi uint32) {
	switch {
	case v == 0 && lo > 0:
		c.add(id, field, "%s is required: %d-%d", what, lo, hi)
	case v < lo || v > hi:
		c.add(id, field, "%d is outside %d-%d", v, lo, hi)
	}
}

func (c *checker) layer2(id string, l *sluicev1.Layer2Network) {
	c.rangeCheck(id, "spec.vlan", "the VLAN id", l.GetVlan(), MinVLAN, MaxVLAN)
	c.rangeCheck(id, "spec.vni", "the VXLAN VNI", l.GetVni(), MinVNI, MaxVNI)
	if mtu := l.GetMtu(); mtu != 0 && (mtu < MinMTU || mtu > MaxMTU) {
		c.add(id, "spec.mtu", "%d is outside %d-%d (leave it out for the default %d)", mtu, MinMTU, MaxMTU, DefaultMTU)
	}
	for i, gw := range l.GetAnycastGateways() {
		field := fmt.Sprintf("spec.anycastGateways[%d]", i)
		p, err := netip.ParsePrefix(gw)
		if err != nil {
			c.add(id, field, "%q is not an address in CIDR form like 10.0.0.1/24", gw)
			continue
		}
		if p.Bits() < p.Addr().BitLen()-1 && p.Addr() == p.Masked().Addr() {
			c.add(id, field, "%q is the network address of %s; give the gateway's own address, e.g. %s/%d",
				gw, p.Masked(), p.Addr().Next(), p.Bits())
		}
	}
	switch {
	case l.GetVrf() != "":
		if err := contract.ValidName(l.GetVrf()); err != nil {
			c.add(id, "spec.vrf", "%v", err)
		}
	case len(l.GetAnycastGateways()) > 0:
		c.add(id, "spec.vrf", "is required when anycastGateways are set: the VRF the gateways route in")
	}
	c.selector(id, l.GetNodeSelector())
}

func (c *checker) vrfRoute(id string, r *sluicev1.VRFRoute) {
	if r.GetVrf() == "" {
		c.add(id, "spec.vrf", "is required: the VRF the routes leak into and out of")
	} else if err := contract.ValidName(r.GetVrf()); err != nil {
		c.add(id, "spec.vrf", "%v", err)
	}
	c.rangeCheck(id, "spec.sequence", "the sequence", r.GetSequence(), MinSequence, MaxSequence)
	for _, list := range []struct {
		name  string
		items []*sluicev1.PrefixItem
	}{{"import", r.GetImport()}, {"export", r.GetExport()}} {
		for i, item := range list.items {
			c.prefixItem(id, fmt.Sprintf("spec.%s[%d]", list.name, i), item)
		}
	}
	if cm := r.GetCommunity(); cm != "" {
		asn, val, ok := strings.Cut(cm, ":")
		_, err1 := strconv.ParseUint(asn, 10, 16)
		_, err2 := strconv.ParseUint(val, 10, 16)
		if !ok || err1 != nil || err2 != nil {
			c.add(id, "spec.community", "%q is not a standard community ASN:VALUE with both parts 0-65535, e.g. 65000:100", cm)
		}
	}
	c.selector(id, r.GetNodeSelector())
}

func (c *checker) prefixItem(id, field string, item *sluicev1.PrefixItem) {
	p, err := netip.ParsePrefix(item.GetCidr())
	if err != nil {
		c.add(id, field+".cidr", "%q is not a prefix in CIDR form like 10.0.0.0/8", item.GetCidr())
		return
	}
	if p.Masked() != p {
		c.add(id, field+".cidr", "%q has host bits set; write %s", item.GetCidr(), p.Masked())
	}
	maxBits := uint32(p.Addr().BitLen())
	plen := uint32(p.Bits())
	ge, le := item.GetGe(), item.GetLe()
	if ge != 0 && (ge < plen || ge > maxBits) {
		c.add(id, field+".ge", "%d must be from the prefix length %d to %d", ge, plen, maxBits)
	}
	if le != 0 && (le < plen || le > maxBits) {
		c.add(id, field+".le", "%d must be from the prefix length %d to %d", le, plen, maxBits)
	}
	if ge != 0 && le != 0 && ge > le {
		c.add(id, field+".le", "%d is less than ge %d", le, ge)
	}
}

func (c *checker) routingTable(id string, t *sluicev1.RoutingTable) {
	switch tid := t.GetTableId(); {
	case tid == 0:
		c.add(id, "spec.tableId", "is required: 1-4294967295 except 253-255")
	case reservedTables[tid] != "":
		c.add(id, "spec.tableId", "%d is reserved for the kernel's %s table; pick another id", tid, reservedTables[tid])
	}
	c.selector(id, t.GetNodeSelector())
}

// selector checks a node selector against the label rules and bounds of
// pkg/contract (labels.go): at most MaxSelectorLabels labels, Kubernetes'
// key and value syntax, and a value for every label.
func (c *checker) selector(id string, s *sluicev1.NodeSelector) {
	const field = "spec.nodeSelector.matchLabels"
	labels := s.GetMatchLabels()
	if n := len(labels); n > contract.MaxSelectorLabels {
		c.add(id, field, "%s labels, over the limit of %d a node selector may require", contract.Thousands(n), contract.MaxSelectorLabels)
		return
	}
	for _, k := range sortedKeys(labels) {
		if err := contract.ValidLabelKey(k); err != nil {
			c.add(id, field, "%v", err)
			continue
		}
		if labels[k] == "" {
			c.add(id, field+"."+k, "label %q has an empty value", k)
		} else if err := contract.ValidLabelValue(k, labels[k]); err != nil {
			c.add(id, field+"."+k, "%v", err)
		}
	}
}
