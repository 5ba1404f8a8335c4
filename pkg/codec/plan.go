package codec

import (
	"sync/atomic"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// kind is how one field's value (a list's element, a map's value) is
// written.
type kind uint8

const (
	kString kind = iota
	kBool
	kInt32  // int32, sint32, sfixed32: a JSON number
	kUint32 // uint32, fixed32
	kInt64  // int64, sint64, sfixed64: a JSON string
	kUint64 // uint64, fixed64
	kEnum   // the value's name, or its number when it has none
	kBytes  // standard base64
	kMessage
	kTimestamp // google.protobuf.Timestamp: RFC 3339, Z
	kDuration  // google.protobuf.Duration: "1.5s"
)

// field is one field of a plan.
type field struct {
	fd    protoreflect.FieldDescriptor
	key   []byte // `"jsonName":`
	kind  kind
	list  bool
	isMap bool // keys are strings; kind is the value's
	msg   *plan
	enum  protoreflect.EnumValueDescriptors
	oneof int // 1 + the oneof's index, 0 outside a oneof
}

// plan is how to write and read one message type: its fields in
// declaration order (protojson's order) and by JSON name.
type plan struct {
	fields []field
	byName map[string]int
	// lastSize is the length of the last value Marshal wrote by the plan:
	// the capacity of the next one's buffer.
	lastSize atomic.Int64
	// gof locates its plain scalar fields in the Go struct (direct.go).
	gof goFields
}

const (
	timestampName = "google.protobuf.Timestamp"
	durationName  = "google.protobuf.Duration"
)

// build plans md, or returns nil when md or any message it holds has a
// field this package leaves to protojson.
func build(md protoreflect.MessageDescriptor) *plan {
	b := builder{plans: map[protoreflect.FullName]*plan{}}
	p := b.build(md)
	if b.failed {
		return nil
	}
	return p
}

// builder holds the plans of one build, for message types that hold
// themselves; one type left to protojson fails the whole build.
type builder struct {
	plans  map[protoreflect.FullName]*plan
	failed bool
}

func (b *builder) build(md protoreflect.MessageDescriptor) *plan {
	p := b.plan(md)
	if p == nil {
		b.failed = true
	}
	return p
}

func (b *builder) plan(md protoreflect.MessageDescriptor) *plan {
	if p, ok := b.plans[md.FullName()]; ok {
		return p
	}
	if md.Syntax() != protoreflect.Proto3 || md.Fields().Len() > 64 || md.Oneofs().Len() > 64 {
		return nil
	}
	p := &plan{byName: map[string]int{}}
	b.plans[md.FullName()] = p
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := field{fd: fd, key: append(appendString(nil, fd.JSONName()), ':'), list: fd.IsList(), isMap: fd.IsMap()}
		vd := fd
		if f.isMap {
			if fd.MapKey().Kind() != protoreflect.StringKind {
				return nil
			}
			vd = fd.MapValue()
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			f.oneof = od.Index() + 1
		}
		var ok bool
		if f.kind, ok = kindOf(vd); !ok {
			return nil
		}
		switch f.kind {
		case kEnum:
			f.enum = vd.Enum().Values()
		case kMessage:
			if f.msg = b.build(vd.Message()); f.msg == nil {
				return nil
			}
		}
		p.fields = append(p.fields, f)
		p.byName[fd.JSONName()] = i
	}
	return p
}

// kindOf says how a field of fd's type is written, if this package writes
// it.
func kindOf(fd protoreflect.FieldDescriptor) (kind, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return kString, true
	case protoreflect.BoolKind:
		return kBool, true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return kInt32, true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return kUint32, true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return kInt64, true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return kUint64, true
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return 0, false
		}
		return kEnum, true
	case protoreflect.BytesKind:
		return kBytes, true
	case protoreflect.MessageKind:
		switch name := fd.Message().FullName(); {
		case name == timestampName:
			return kTimestamp, true
		case name == durationName:
			return kDuration, true
		case name.Parent() == "google.protobuf":
			return 0, false // Struct, Value, Any, wrappers, FieldMask, Empty: protojson's own forms
		}
		return kMessage, true
	}
	return 0, false // float, double, groups
}
