// Package codec encodes and decodes stored values and events as protojson,
// several times faster than protojson itself for the values every node
// writes and reads on each change (statuses, desired configs, events,
// presences).
//
// The output is protojson: the nats CLI, protojson and every older version
// read it. The encoder writes what protojson writes (the same field names,
// the same order, enums by name, 64-bit integers and timestamps as
// strings), without protojson's randomised spacing. The decoder takes the
// subset of protojson that such values use and hands anything else — a
// field it does not know, a field by its proto name, a null, an escaped
// string, an enum by number, a number in another form, a message type
// holding a double or a well-known type other than Timestamp and Duration
// — to protojson, so that every input decodes exactly as protojson decodes
// it, errors included (codec_test.go checks both directions over every
// stored type, and FuzzUnmarshal checks any input against protojson).
package codec

import (
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var (
	slowMarshal = protojson.MarshalOptions{}
	slowStrict  = protojson.UnmarshalOptions{}
)

// Marshal encodes m as protojson.MarshalOptions{}.Marshal does (same
// fields, names and values; no random spaces).
func Marshal(m proto.Message) ([]byte, error) {
	r := m.ProtoReflect()
	p := planOf(r.Descriptor())
	if p == nil {
		return slowMarshal.Marshal(m)
	}
	// Sized by the last value of the type written, and an eighth more: a
	// status or an event, written once per node and transition, then takes
	// one allocation instead of two or three.
	n := int(p.lastSize.Load())
	buf := make([]byte, 0, max(256, n+n/8))
	out, ok := p.encode(buf, r)
	if !ok {
		// A value protojson refuses (invalid UTF-8, a timestamp out of
		// range): protojson says why.
		return slowMarshal.Marshal(m)
	}
	p.lastSize.Store(int64(len(out)))
	return out, nil
}

// Unmarshal decodes b into m as protojson.UnmarshalOptions{}.Unmarshal does
// (strictly: an unknown field is an error). m is reset first.
func Unmarshal(b []byte, m proto.Message) error {
	r := m.ProtoReflect()
	if p := planOf(r.Descriptor()); p != nil {
		proto.Reset(m)
		d := decoder{b: b}
		if d.message(p, r) && d.end() {
			return nil
		}
	}
	proto.Reset(m)
	return slowStrict.Unmarshal(b, m)
}

// plans holds one plan per message type, or nil for a type this package
// leaves to protojson.
var plans sync.Map // protoreflect.FullName → *plan

func planOf(md protoreflect.MessageDescriptor) *plan {
	if v, ok := plans.Load(md.FullName()); ok {
		return v.(*plan)
	}
	p := build(md)
	v, _ := plans.LoadOrStore(md.FullName(), p)
	return v.(*plan)
}
