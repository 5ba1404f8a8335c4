package intent_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// slowInput is how long one Parse or Validate of a fuzzed input may take
// before it counts as hanging; real inputs take microseconds.
const slowInput = 5 * time.Second

// FuzzParse feeds arbitrary bytes to the parser of `sluice apply -f`.
// Parse never panics or hangs; every problem is a *ParseError saying where
// (file, document, line); every intent returned has a kind and a name; and
// the intents it accepts, written back as JSON and as YAML, parse to the
// same intents and validate identically.
func FuzzParse(f *testing.F) {
	for _, seed := range parseSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		ins, err := intent.Parse("f.yaml", data)
		if d := time.Since(start); d > slowInput {
			t.Fatalf("Parse took %s for %d bytes", d, len(data))
		}
		checkParseErrors(t, "f.yaml", err)
		for _, in := range ins {
			if intent.Kind(in) == "" || in.GetName() == "" {
				t.Fatalf("Parse returned an intent without a kind or a name: %v", in)
			}
		}
		if len(ins) == 0 {
			return
		}
		want := intent.Validate(ins)
		for _, form := range []string{"json", "yaml"} {
			doc := writeIntents(t, ins, form)
			again, err := intent.Parse("again."+form, doc)
			if err != nil {
				t.Fatalf("%v, written back as %s, does not parse:\n%s\n%v", ins, form, doc, err)
			}
			if !slices.EqualFunc(ins, again, func(a, b *sluicev1.Intent) bool { return proto.Equal(a, b) }) {
				t.Fatalf("%s round trip changed the intents:\n  %v\n  %v", form, ins, again)
			}
			if got := intent.Validate(again); !slices.EqualFunc(want, got, func(a, b *sluicev1.FieldError) bool { return proto.Equal(a, b) }) {
				t.Fatalf("%s round trip validates differently:\n  %v\n  %v", form, want, got)
			}
		}
	})
}

// checkParseErrors fails unless err is nil or every error joined in it is
// a *ParseError naming file, document and line, with a message.
func checkParseErrors(t *testing.T, file string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) == 0 {
		t.Fatalf("error %q joins no errors", err)
	}
	for _, e := range errs {
		var pe *intent.ParseError
		if !errors.As(e, &pe) {
			t.Fatalf("error %q (%T) is not a *ParseError", e, e)
		}
		if pe.File != file || pe.Doc < 1 || pe.Line < 1 || pe.Msg == "" {
			t.Fatalf("error %q does not say where and what: %+v", e, *pe)
		}
	}
}

// writeIntents writes ins as one intent file, a list of {kind, name, spec}
// with the spec in protojson: as JSON, or as the YAML of that JSON.
func writeIntents(t *testing.T, ins []*sluicev1.Intent, form string) []byte {
	t.Helper()
	docs := make([]map[string]any, 0, len(ins))
	for _, in := range ins {
		var spec proto.Message
		switch s := in.GetSpec().(type) {
		case *sluicev1.Intent_Layer2Network:
			spec = s.Layer2Network
		case *sluicev1.Intent_VrfRoute:
			spec = s.VrfRoute
		case *sluicev1.Intent_RoutingTable:
			spec = s.RoutingTable
		}
		b, err := protojson.Marshal(spec)
		if err != nil {
			t.Fatalf("encode spec of %v: %v", in, err)
		}
		docs = append(docs, map[string]any{"kind": intent.Kind(in), "name": in.GetName(), "spec": json.RawMessage(b)})
	}
	js, err := json.Marshal(docs)
	if err != nil {
		t.Fatal(err)
	}
	if form == "json" {
		return js
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatalf("write %s as YAML: %v", js, err)
	}
	return y
}

// parseSeeds are the repository's intent files and the inputs the parser's
// tests cover.
func parseSeeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, pattern := range []string{"../../examples/*.yaml", "../../examples/broken/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			f.Fatalf("no seed files match %s: %v", pattern, err)
		}
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, b)
		}
	}
	for _, s := range []string{
		twoDocs,
		`[{"kind": "RoutingTable", "name": "t100", "spec": {"tableId": 100}}, {"kind": "VRFRoute", "name": "leak", "spec": {"vrf": "tenant-a", "sequence": 10, "import": [{"cidr": "10.0.0.0/8", "le": 24}], "community": "65000:100"}}]`,
		"- {kind: RoutingTable, name: a, spec: {tableId: 1}}\n- {kind: RoutingTable, name: b, spec: {table: 1}}\n",
		"kind: Layer2Network\nname: a\nspec: {vlan: ten, vni: -1, mtu: -1500, anycastGateways: 10.0.0.1/24}\n",
		"kind: RoutingTable\nname: a\nname: b\nspec: {tableId: 1}\n",
		"kind: RoutingTable\nname: no\nspec: {tableId: 1}\n",
		"kind: RoutingTable\nname: a\nspec: {tableId: 1}\n---\nkind: RoutingTable\nname: [b\n",
		"kind: Layer2Network\nname: a\nspec: {vlan: \"100\", vni: 1e3, nodeSelector: {matchLabels: {zone: null}}}\n",
		"hello\n",
		"",
	} {
		out = append(out, []byte(s))
	}
	return out
}
