package codec

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fuzzTypes are the types FuzzUnmarshal decodes every input as: the hot
// ones and one left to protojson.
var fuzzTypes = []protoreflect.MessageType{
	(&sluicev1.NodeStatus{}).ProtoReflect().Type(),
	(&sluicev1.DesiredConfig{}).ProtoReflect().Type(),
	(&sluicev1.Event{}).ProtoReflect().Type(),
	(&sluicev1.NodePresence{}).ProtoReflect().Type(),
	(&sluicev1.Rollout{}).ProtoReflect().Type(),
}

// FuzzUnmarshal: whatever the input, Unmarshal answers as protojson's
// strict Unmarshal does: an error for an error, an equal message otherwise.
func FuzzUnmarshal(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, mt := range fuzzTypes {
		for range 8 {
			m := mt.New()
			fill(m, r, 0)
			b, err := protojson.Marshal(m.Interface())
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range []string{`{}`, ` {"node":"a"} `, `{"node":"a","node":"b"}`, `{"node":null}`, `{"phase":2}`,
		`{"phase":"NODE_PHASE_NOPE"}`, `{"lastUpdate":"2026-01-02T03:04:05+01:00"}`, `{"lastUpdate":"2026-01-02T03:04:05.1234567891Z"}`,
		`{"leaderEpoch":12}`, `{"pause":{"seen":" 0"}}`, `{"leaderEpoch":"-0"}`, `{"leaderEpoch":"012"}`, `{"leaderEpoch":1e3}`, `{"deadline":"+.5s"}`, `{"deadline":"00s"}`,
		`{"labels":{"a":"b","a":"c"}}`, `{"node":"\u00e4"}`, "{\"node\":\"\xff\"}", `{"applied_fingerprint":"x"}`, `{"node":"a"}x`,
		`{"cancel":true,"cancel":false}`, `{"cancel":truex}`, `[]`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mt := range fuzzTypes {
			want, got := mt.New().Interface(), mt.New().Interface()
			werr := protojson.UnmarshalOptions{}.Unmarshal(b, want)
			gerr := Unmarshal(b, got)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%s %q: protojson %v, Unmarshal %v", mt.Descriptor().FullName(), b, werr, gerr)
			}
			if werr == nil && !proto.Equal(want, got) {
				t.Fatalf("%s %q: protojson %v, Unmarshal %v", mt.Descriptor().FullName(), b, want, got)
			}
		}
	})
}
