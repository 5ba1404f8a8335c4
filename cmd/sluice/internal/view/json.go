package view

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/pkg/store"
)

// JSON is m as -o json and -o yaml print it: protojson, as stored (field
// names and order, enum names, timestamps), except that 64-bit integers are
// numbers. protojson writes them as strings ("generation": "3"), which a
// script's comparison or jq's arithmetic takes for text.
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
		}
	}
	return obj
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
