package registry_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const sluiceCRDs = "../../deploy/helm/sluice/crds/sluice.dev.yaml"

// schema is the part of an OpenAPI v3 schema the CRDs use.
type schema struct {
	Type                 string            `json:"type"`
	Properties           map[string]schema `json:"properties"`
	Items                *schema           `json:"items"`
	AdditionalProperties *schema           `json:"additionalProperties"`
	Required             []string          `json:"required"`
	Minimum              *float64          `json:"minimum"`
	Maximum              *float64          `json:"maximum"`
}

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind   string `json:"kind"`
			Plural string `json:"plural"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Schema struct {
				OpenAPIV3Schema schema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

func readSluiceCRDs(t *testing.T) map[string]crd {
	t.Helper()
	b, err := os.ReadFile(sluiceCRDs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]crd{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var c crd
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatalf("%s: %v", sluiceCRDs, err)
		}
		out[c.Spec.Names.Kind] = c
	}
	return out
}

// checkSchema compares an OpenAPI schema with a message: the same fields
// by their JSON (camelCase) names, each of the matching type.
func checkSchema(t *testing.T, path string, s schema, md protoreflect.MessageDescriptor) {
	t.Helper()
	if s.Type != "object" {
		t.Errorf("%s: type %q, want object (%s)", path, s.Type, md.FullName())
	}
	var want []string
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		want = append(want, f.JSONName())
		p, ok := s.Properties[f.JSONName()]
		if !ok {
			continue
		}
		checkField(t, path+"."+f.JSONName(), p, f)
	}
	var got []string
	for k := range s.Properties {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: properties %v, want the fields of %s: %v", path, got, md.FullName(), want)
	}
}

func checkField(t *testing.T, path string, s schema, f protoreflect.FieldDescriptor) {
	t.Helper()
	switch {
	case f.IsMap():
		if s.Type != "object" || s.AdditionalProperties == nil || s.AdditionalProperties.Type != "string" {
			t.Errorf("%s: want an object of strings (a map)", path)
		}
	case f.IsList():
		if s.Type != "array" || s.Items == nil {
			t.Errorf("%s: type %q, want array", path, s.Type)
			return
		}
		checkScalar(t, path+"[]", *s.Items, f)
	default:
		checkScalar(t, path, s, f)
	}
}

func checkScalar(t *testing.T, path string, s schema, f protoreflect.FieldDescriptor) {
	t.Helper()
	switch f.Kind() {
	case protoreflect.MessageKind:
		checkSchema(t, path, s, f.Message())
	case protoreflect.StringKind:
		if s.Type != "string" {
			t.Errorf("%s: type %q, want string", path, s.Type)
		}
	case protoreflect.Uint32Kind:
		if s.Type != "integer" {
			t.Errorf("%s: type %q, want integer", path, s.Type)
		}
	default:
		t.Errorf("%s: a %s field, which this test does not know how to compare", path, f.Kind())
	}
}

// TestSluiceCRDs_SchemaIsTheProto: the chart's CRDs of sluice's kinds
// declare exactly the fields of intent.proto, with their types, the
// configurator's bounds, and the kinds the registry reads.
func TestSluiceCRDs_SchemaIsTheProto(t *testing.T) {
	crds := readSluiceCRDs(t)
	intentFile := sluicev1.File_sluice_v1_intent_proto
	for _, kind := range []string{"Layer2Network", "VRFRoute", "RoutingTable"} {
		t.Run(kind, func(t *testing.T) {
			c, ok := crds[kind]
			if !ok {
				t.Fatalf("%s has no CRD of kind %s", sluiceCRDs, kind)
			}
			if c.Spec.Group != registry.SluiceGroup || c.Spec.Scope != "Namespaced" || len(c.Spec.Versions) != 1 || c.Spec.Versions[0].Name != "v1alpha1" {
				t.Fatalf("group %s, scope %s, versions %v; want %s, Namespaced, v1alpha1", c.Spec.Group, c.Spec.Scope, c.Spec.Versions, registry.SluiceGroup)
			}
			if c.Spec.Names.Plural != strings.ToLower(kind)+"s" {
				t.Errorf("plural %s, want %ss", c.Spec.Names.Plural, strings.ToLower(kind))
			}
			if !slices.Contains(registry.KubeKinds(), kind) {
				t.Errorf("the registry does not read %s (it reads %v)", kind, registry.KubeKinds())
			}
			spec, ok := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			if !ok {
				t.Fatal("the schema has no spec")
			}
			checkSchema(t, "spec", spec, intentFile.Messages().ByName(protoreflect.Name(kind)))
		})
	}
	bounds := []struct {
		kind, field string
		lo, hi      float64
	}{
		{"Layer2Network", "vlan", intent.MinVLAN, intent.MaxVLAN},
		{"Layer2Network", "vni", intent.MinVNI, intent.MaxVNI},
		{"Layer2Network", "mtu", intent.MinMTU, intent.MaxMTU},
		{"VRFRoute", "sequence", intent.MinSequence, intent.MaxSequence},
		{"RoutingTable", "tableId", 1, 1<<32 - 1},
	}
	for _, b := range bounds {
		p := crds[b.kind].Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[b.field]
		if p.Minimum == nil || p.Maximum == nil || *p.Minimum != b.lo || *p.Maximum != b.hi {
			t.Errorf("%s spec.%s: bounds %v-%v, want the configurator's %v-%v", b.kind, b.field, p.Minimum, p.Maximum, b.lo, b.hi)
		}
	}
}
