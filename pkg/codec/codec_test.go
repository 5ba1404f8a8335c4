package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// sluiceTypes is every message type of proto/sluice/v1.
func sluiceTypes(t testing.TB) []protoreflect.MessageType {
	var out []protoreflect.MessageType
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		if mt.Descriptor().ParentFile().Package() == "sluice.v1" {
			out = append(out, mt)
		}
		return true
	})
	if len(out) < 20 {
		t.Fatalf("found %d sluice.v1 message types: is the proto package linked in?", len(out))
	}
	return out
}

// The values every node writes and reads on each change are the ones this
// package exists for: if one of them gains a field of a kind left to
// protojson, it loses the fast path, and this test says so.
func TestHotTypesArePlanned(t *testing.T) {
	for _, m := range []proto.Message{&sluicev1.NodeStatus{}, &sluicev1.DesiredConfig{}, &sluicev1.Event{}, &sluicev1.NodePresence{}} {
		if planOf(m.ProtoReflect().Descriptor()) == nil {
			t.Errorf("%s is left to protojson: a field of it (or of a message it holds) is a kind this package does not plan", m.ProtoReflect().Descriptor().FullName())
		}
	}
	// And a type holding a double is left to protojson (Rollout's strategy).
	if planOf((&sluicev1.Rollout{}).ProtoReflect().Descriptor()) != nil {
		t.Error("Rollout (it holds doubles) is planned")
	}
}

// Every sluice type, filled at random in every field (strings with escapes,
// non-ASCII and control characters, oneofs, maps, lists, timestamps and
// durations across their range): Marshal writes exactly protojson's output
// less its spacing, and Unmarshal reads protojson's output, and its own,
// back to an equal message.
func TestMarshalUnmarshal_AgreeWithProtojsonOnEveryType(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	planned := 0
	for _, mt := range sluiceTypes(t) {
		if planOf(mt.Descriptor()) != nil {
			planned++
		}
		for i := range 60 {
			m := mt.New()
			fill(m, r, 0)
			msg := m.Interface()
			name := fmt.Sprintf("%s #%d", mt.Descriptor().FullName(), i)

			want, err := protojson.Marshal(msg)
			if err != nil {
				t.Fatalf("%s: protojson: %v", name, err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, want); err != nil {
				t.Fatal(err)
			}
			got, err := Marshal(msg)
			if err != nil {
				t.Fatalf("%s: Marshal: %v", name, err)
			}
			if planOf(mt.Descriptor()) == nil { // protojson's own output, spaced at random
				var c bytes.Buffer
				if err := json.Compact(&c, got); err != nil {
					t.Fatal(err)
				}
				got = c.Bytes()
			}
			if !bytes.Equal(got, compact.Bytes()) {
				t.Fatalf("%s: Marshal wrote\n%s\nprotojson\n%s", name, got, compact.Bytes())
			}
			for _, in := range [][]byte{want, got} {
				back := mt.New().Interface()
				if err := Unmarshal(in, back); err != nil {
					t.Fatalf("%s: Unmarshal(%s): %v", name, in, err)
				}
				if !proto.Equal(back, msg) {
					t.Fatalf("%s: Unmarshal(%s) = %v, want %v", name, in, back, msg)
				}
			}
		}
	}
	if planned < 20 {
		t.Errorf("only %d types are planned", planned)
	}
}

// fill sets every field of m to a random value (each left unset now and
// then), nested messages up to a depth.
func fill(m protoreflect.Message, r *rand.Rand, depth int) {
	fds := m.Descriptor().Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if r.IntN(5) == 0 {
			continue
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && m.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range r.IntN(4) {
				mp.Set(protoreflect.ValueOfString(randString(r)).MapKey(), randValue(fd.MapValue(), func() protoreflect.Value { return mp.NewValue() }, r, depth))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range r.IntN(4) {
				l.Append(randValue(fd, l.NewElement, r, depth))
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth < 4 {
				m.Set(fd, randValue(fd, func() protoreflect.Value { return m.NewField(fd) }, r, depth))
			}
		default:
			m.Set(fd, randValue(fd, nil, r, depth))
		}
	}
}

func randValue(fd protoreflect.FieldDescriptor, newMsg func() protoreflect.Value, r *rand.Rand, depth int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randString(r))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(r.Uint32()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(r.Uint32())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(r.Uint64()) >> r.IntN(64))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(r.Uint64() >> r.IntN(64))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32() * 100)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.Float64() * 1000)
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if r.IntN(8) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(100 + r.IntN(50))) // a number with no name
		}
		return protoreflect.ValueOfEnum(vals.Get(r.IntN(vals.Len())).Number())
	}
	v := newMsg()
	m := v.Message()
	switch m.Descriptor().FullName() {
	case timestampName:
		setSecondsNanos(m, minTimestampSeconds+r.Int64N(maxTimestampSeconds-minTimestampSeconds), randNanos(r))
	case durationName:
		secs, nanos := r.Int64N(maxDurationSeconds)>>r.IntN(40), randNanos(r)
		if r.IntN(2) == 0 {
			secs, nanos = -secs, -nanos
		}
		setSecondsNanos(m, secs, nanos)
	case "google.protobuf.DoubleValue":
		m.Set(m.Descriptor().Fields().ByNumber(1), protoreflect.ValueOfFloat64(r.Float64()))
	default:
		fill(m, r, depth+1)
	}
	return v
}

// randNanos is zero, whole milliseconds, whole microseconds or any
// nanoseconds, so that each fraction width is written.
func randNanos(r *rand.Rand) int32 {
	n := r.Int32N(nanosPerSecond)
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return n / 1e6 * 1e6
	case 2:
		return n / 1e3 * 1e3
	}
	return n
}

func randString(r *rand.Rand) string {
	parts := []string{"node-01", "", "a\"b", `back\slash`, "tab\there", "line\nbreak", "\x00\x01\x1f", "\x7f", "zone-ä", "日本", "🙂", "<&>", "'", " spaced ", "\u2028", "\ufffd"}
	var b strings.Builder
	for range r.IntN(3) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}
