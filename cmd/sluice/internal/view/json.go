package view

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
)

// JSON is m as -o json and -o yaml print it: protojson, as stored (field
// names and order, enum names, timestamps), except that 64-bit integers are
// numbers, and that each enum field of sluice's is followed by its word as
// the tables show it ("phase": "ROLLOUT_PHASE_SUCCEEDED", "phaseName":
// "Succeeded"; EnumWord). protojson writes 64-bit integers as strings
// ("generation": "3"), which a script's comparison or jq's arithmetic takes
// for text.
func JSON(m proto.Message) (json.RawMessage, error) {
	b, err := store.Marshal(m)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeOrdered(d)
	if err != nil {
		return nil, fmt.Errorf("decode protojson: %w", err)
	}
	return json.Marshal(numbers(m.ProtoReflect().Descriptor(), v))
}

// ordered is a JSON object that keeps its keys' order.
type ordered struct {
	keys []string
	vals map[string]any
}

func (o *ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered reads one JSON value: objects as *ordered, arrays as []any.
func decodeOrdered(d *json.Decoder) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &ordered{vals: map[string]any{}}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := decodeOrdered(d)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k)
			o.vals[k] = v
		}
		_, err := d.Token() // }
		return o, err
	case json.Delim('['):
		l := []any{}
		for d.More() {
			v, err := decodeOrdered(d)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := d.Token() // ]
		return l, err
	}
	return t, nil
}

// numbers turns the 64-bit integer fields of v, the protojson of a message
// of descriptor md, into numbers, in nested messages, lists and maps too.
func numbers(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(*ordered)
	if !ok {
		return v
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		val, ok := obj.vals[fd.JSONName()]
		if !ok {
			continue
		}
		switch {
		case fd.IsMap():
			if m, ok := val.(*ordered); ok {
				for k, e := range m.vals {
					m.vals[k] = number(fd.MapValue(), e)
				}
			}
		case fd.IsList():
			if l, ok := val.([]any); ok {
				for j, e := range l {
					l[j] = number(fd, e)
				}
			}
		default:
			obj.vals[fd.JSONName()] = number(fd, val)
			if fd.Kind() == protoreflect.EnumKind {
				obj.addWord(fd, val)
			}
		}
	}
	return obj
}

// addWord puts the word of enum field fd's value val (its protojson name)
// under the key fd's JSON name + "Name", right after the field, unless the
// message has a field of that name or the value has no word.
func (o *ordered) addWord(fd protoreflect.FieldDescriptor, val any) {
	name, _ := val.(string)
	key := fd.JSONName() + "Name"
	if _, taken := o.vals[key]; taken || fd.ContainingMessage().Fields().ByJSONName(key) != nil {
		return
	}
	ev := fd.Enum().Values().ByName(protoreflect.Name(name))
	if ev == nil || fd.Enum().FullName().Parent() != sluiceProtoPackage {
		return
	}
	word := EnumWord(ev)
	if word == "" {
		return
	}
	i := slices.Index(o.keys, fd.JSONName())
	o.keys = slices.Insert(o.keys, i+1, key)
	o.vals[key] = word
}

// sluiceProtoPackage is the package of sluice's own enums, the ones with words.
const sluiceProtoPackage protoreflect.FullName = "sluice.v1"

// EnumWord is an enum value as the tables show it: the value's name without
// its enum's prefix, in words run together ("ROLLOUT_PHASE_PARTIALLY_FAILED"
// of RolloutPhase is "PartiallyFailed"), and "" for the UNSPECIFIED value.
func EnumWord(v protoreflect.EnumValueDescriptor) string {
	prefix := strings.ToUpper(contract.Snake(string(v.Parent().Name()))) + "_"
	s := strings.TrimPrefix(string(v.Name()), prefix)
	if s == "UNSPECIFIED" {
		return ""
	}
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(s), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// number is one value of field fd.
func number(fd protoreflect.FieldDescriptor, v any) any {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if s, ok := v.(string); ok {
			return json.Number(s)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		// Well-known types (Timestamp, Duration, Struct) have JSON forms of
		// their own, with no 64-bit integer field in them.
		if fd.Message().FullName().Parent() != "google.protobuf" {
			return numbers(fd.Message(), v)
		}
	}
	return v
}
