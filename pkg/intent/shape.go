package intent

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// shapeProblem is a field of a decoded spec that protojson would reject.
type shapeProblem struct{ path, msg string }

// checkJSONShape walks a decoded JSON value against a message descriptor and
// reports unknown fields and values of the wrong type with their full path
// (spec.nodeSelector.matchLabels), which protojson's own errors lack.
func checkJSONShape(md protoreflect.MessageDescriptor, v any, path string) []shapeProblem {
	obj, ok := v.(map[string]any)
	if !ok {
		return []shapeProblem{{path, fmt.Sprintf("must be an object with fields %s, not %s", fieldList(md), describeJSON(v))}}
	}
	var out []shapeProblem
	for _, k := range sortedKeys(obj) {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByTextName(k)
		}
		if fd == nil {
			out = append(out, shapeProblem{path + "." + k, fmt.Sprintf("unknown field; %s has fields %s", path, fieldList(md))})
			continue
		}
		fv := obj[k]
		fpath := path + "." + fd.JSONName()
		if fv == nil { // null leaves the field unset
			continue
		}
		switch {
		case fd.IsMap():
			m, ok := fv.(map[string]any)
			if !ok {
				out = append(out, shapeProblem{fpath, fmt.Sprintf("must be an object of %s values, not %s", kindName(fd.MapValue()), describeJSON(fv))})
				continue
			}
			for _, mk := range sortedKeys(m) {
				out = append(out, checkValue(fd.MapValue(), m[mk], fpath+"."+mk)...)
			}
		case fd.IsList():
			l, ok := fv.([]any)
			if !ok {
				out = append(out, shapeProblem{fpath, fmt.Sprintf("must be a list, not %s", describeJSON(fv))})
				continue
			}
			for i, item := range l {
				out = append(out, checkValue(fd, item, fmt.Sprintf("%s[%d]", fpath, i))...)
			}
		default:
			out = append(out, checkValue(fd, fv, fpath)...)
		}
	}
	return out
}

// checkValue checks one singular value of field fd.
func checkValue(fd protoreflect.FieldDescriptor, v any, path string) []shapeProblem {
	bad := func() []shapeProblem {
		return []shapeProblem{{path, fmt.Sprintf("must be %s, not %s", kindName(fd), describeJSON(v))}}
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			return nil // well-known types have their own JSON forms; protojson checks them
		}
		return checkJSONShape(fd.Message(), v, path)
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return bad()
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case protoreflect.EnumKind:
		switch v.(type) {
		case string, json.Number:
		default:
			return bad()
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if !wholeNumberIn(v, 0, math.MaxUint32) {
			if rule, ok := numberRules[fd.FullName()]; ok {
				// Say the rule the value must meet, not the wire type's range.
				return []shapeProblem{{path, fmt.Sprintf("must be %s, not %s", rule, describeJSON(v))}}
			}
			return bad()
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if !wholeNumberIn(v, math.MinInt32, math.MaxInt32) {
			return bad()
		}
	}
	// 64-bit integers and floats: protojson's own checks are precise enough.
	return nil
}

// numberRules are the documented ranges of the numeric fields (validate.go
// checks them), for a value that is not even a whole number of the field's
// type: "-1500" for an MTU is outside 1000-9216, not outside 0-4294967295.
var numberRules = map[protoreflect.FullName]string{
	"sluice.v1.Layer2Network.vlan":    fmt.Sprintf("a VLAN id from %d to %d", MinVLAN, MaxVLAN),
	"sluice.v1.Layer2Network.vni":     fmt.Sprintf("a VXLAN VNI from %d to %d", MinVNI, MaxVNI),
	"sluice.v1.Layer2Network.mtu":     fmt.Sprintf("an MTU from %d to %d (leave it out for the default %d)", MinMTU, MaxMTU, DefaultMTU),
	"sluice.v1.VRFRoute.sequence":     fmt.Sprintf("a sequence from %d to %d", MinSequence, MaxSequence),
	"sluice.v1.RoutingTable.table_id": "a routing table id from 1 to 4294967295 except 253-255",
}

// wholeNumberIn reports whether v is an integer in [lo, hi], written as a
// number or, as protojson allows, a string.
func wholeNumberIn(v any, lo, hi int64) bool {
	var s string
	switch t := v.(type) {
	case json.Number:
		s = t.String()
	case string:
		s = t
	default:
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= lo && n <= hi
}

func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "an object"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "a string"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.EnumKind:
		return "an enum name"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return "a whole number from 0 to 4294967295"
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return "a 32-bit whole number"
	}
	return "a number"
}

func fieldList(md protoreflect.MessageDescriptor) string {
	names := make([]string, 0, md.Fields().Len())
	for i := range md.Fields().Len() {
		names = append(names, md.Fields().Get(i).JSONName())
	}
	return strings.Join(names, ", ")
}

// describeJSON names the type and value of a decoded JSON value for errors.
func describeJSON(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", t)
	case json.Number:
		return "the number " + t.String()
	case bool:
		return fmt.Sprintf("%t", t)
	}
	return fmt.Sprintf("%v", v)
}
