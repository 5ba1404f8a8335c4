package configurator

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// FuzzDecodeRequest feeds arbitrary bytes to the configurator's API as
// every request it serves, and an apply request that decodes to the checks
// an apply makes before it reads anything stored. Nothing panics; a request
// that does not decode is a 400 naming the request type; one that decodes
// re-encodes to an equal request.
func FuzzDecodeRequest(f *testing.F) {
	examples, err := intent.ParseFiles("../../examples")
	if err != nil {
		f.Fatal(err)
	}
	for _, req := range []proto.Message{
		&sluicev1.ApplyRequest{Intents: examples, Source: contract.SourceAPI, RequestId: "r1",
			Strategy: &sluicev1.Strategy{MaxParallel: "10%", FirstWave: 1, WaveGrowth: 2}},
		&sluicev1.DeleteRequest{Kind: intent.KindRoutingTable, Name: "mgmt", Strategy: &sluicev1.Strategy{WhileActive: contract.WhileActiveSupersede}},
		&sluicev1.UndoRequest{},
		&sluicev1.RetryRequest{},
	} {
		b, err := protojson.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "{not json", "{}", "null", `{"intents": [{}]}`, `{"intents": [{"name": "a", "routingTable": {"tableId": 254}}], "strategy": {"waveGrowth": 1e19, "firstWave": 1}}`} {
		f.Add([]byte(s))
	}
	requests := []func() proto.Message{
		func() proto.Message { return &sluicev1.ApplyRequest{} },
		func() proto.Message { return &sluicev1.DeleteRequest{} },
		func() proto.Message { return &sluicev1.UndoRequest{} },
		func() proto.Message { return &sluicev1.RetryRequest{} },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newReq := range requests {
			req := newReq()
			name := string(req.ProtoReflect().Descriptor().Name())
			if err := decodeRequest(data, req); err != nil {
				var ae *apiError
				if !errors.As(err, &ae) || ae.code != contract.ErrCodeInvalid || !strings.Contains(ae.desc, name) {
					t.Fatalf("%s: error %v is not a 400 naming the request", name, err)
				}
				continue
			}
			b, err := protojson.Marshal(req)
			if err != nil {
				t.Fatalf("%s: %v decoded but does not encode: %v", name, req, err)
			}
			again := newReq()
			if err := decodeRequest(b, again); err != nil || !proto.Equal(req, again) {
				t.Fatalf("%s: round trip of %v: %v (%v)", name, req, again, err)
			}
			if ar, ok := req.(*sluicev1.ApplyRequest); ok && intent.CheckApplySize(len(ar.GetIntents())) == nil {
				// What an apply checks before it reads the stored intents.
				intent.ValidateStrategy(ar.GetStrategy())
				intent.Validate(ar.GetIntents())
			}
		}
	})
}
