package intent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// FuzzValidate validates arbitrary sets of intents, decoded from the
// binary protobuf of a Revision so that the fuzzer mutates their structure
// (kinds, selectors, values shared by many intents) and not only their
// text. Validate (its rules and the conflict check of conflicts.go) never
// panics or hangs; every problem names a field and a rule, in sorted order;
// and the outcome does not depend on the order the intents come in.
func FuzzValidate(f *testing.F) {
	for _, set := range validateSeeds(f) {
		b, err := proto.Marshal(&sluicev1.Revision{Intents: set})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rev sluicev1.Revision
		if proto.Unmarshal(data, &rev) != nil {
			return
		}
		ins := rev.GetIntents()
		start := time.Now()
		errs := intent.Validate(ins)
		if d := time.Since(start); d > slowInput {
			t.Fatalf("Validate took %s for %d intents", d, len(ins))
		}
		for _, fe := range errs {
			if fe.GetField() == "" || fe.GetRule() == "" {
				t.Fatalf("problem without a field or a rule: %v", fe)
			}
			if line := intent.FormatFieldError(fe); !contract.Printable(line) {
				t.Fatalf("a problem prints a control character to the terminal: %q", line)
			}
		}
		sorted := slices.Clone(errs)
		intent.SortFieldErrors(sorted)
		if !slices.Equal(errs, sorted) {
			t.Fatalf("problems are not sorted: %v", errs)
		}
		if !uniqueIDs(ins) {
			return // which of two intents of one ID is checked depends on their order
		}
		reversed := slices.Clone(ins)
		slices.Reverse(reversed)
		if got := intent.Validate(reversed); !slices.EqualFunc(errs, got, func(a, b *sluicev1.FieldError) bool { return proto.Equal(a, b) }) {
			t.Fatalf("the order of the intents changed the problems:\n  %v\n  %v", errs, got)
		}
	})
}

// uniqueIDs reports whether no two intents have the same kind and name.
func uniqueIDs(ins []*sluicev1.Intent) bool {
	seen := map[string]bool{}
	for _, in := range ins {
		id := in.GetName()
		if intent.Kind(in) != "" {
			id = intent.ID(in)
		}
		if seen[id] {
			return false
		}
		seen[id] = true
	}
	return true
}

// validateSeeds are the repository's examples and the sets the validator's
// tests cover: valid, broken and conflicting.
func validateSeeds(f *testing.F) [][]*sluicev1.Intent {
	examples, err := intent.ParseFiles("../../examples")
	if err != nil {
		f.Fatal(err)
	}
	broken, err := intent.ParseFiles("../../examples/broken")
	if err != nil {
		f.Fatal(err)
	}
	return [][]*sluicev1.Intent{
		examples,
		broken,
		append(slices.Clone(examples), broken...),
		{
			l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone", "a") }),
			l2("b", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("rack", "1") }),
			l2("c", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone", "b", "rack", "1") }),
			l2("d", nil),
		},
		{
			table("t1", func(s *sluicev1.RoutingTable) { s.TableId = 254 }),
			table("t1", nil),
			vrf("v", func(s *sluicev1.VRFRoute) {
				s.Import = []*sluicev1.PrefixItem{{Cidr: "10.0.0.1/8", Ge: 40, Le: 4}}
				s.Community = "65536:1"
			}),
			{Name: "no-spec"},
			{Name: "Bad Name", Spec: &sluicev1.Intent_RoutingTable{}},
		},
		{ // issue 38, item 6: control characters and labels past the limits
			l2("evil\x1b]0;pwned\a", func(s *sluicev1.Layer2Network) { s.Vrf = "v\u009b2J" }),
			table("t", func(s *sluicev1.RoutingTable) {
				s.NodeSelector = sel("zone\x1b[31m", "a", "rack", strings.Repeat("r", 64), "Bad.Prefix/x", "y")
			}),
			vrf("many", func(s *sluicev1.VRFRoute) { s.NodeSelector = manyLabels(contract.MaxSelectorLabels + 1) }),
		},
	}
}
