package agent

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// FuzzDecodeDesired feeds arbitrary bytes to what the agent does with a
// desired config it reads (a republished write or a Get): the strict
// decode and the bucket's well-formedness rule. It never panics; a refused
// value says which of the two refused it; a value the agent accepts is read
// identically, and found well-formed, by the services that decode leniently
// (pkg/store), and re-encodes to a value the agent accepts the same.
func FuzzDecodeDesired(f *testing.F) {
	examples, err := intent.ParseFiles("../../examples")
	if err != nil {
		f.Fatal(err)
	}
	render.Sort(examples)
	rev := &sluicev1.Revision{Id: render.RevisionID(examples), Intents: examples}
	cfg := render.NodeConfig(rev, map[string]string{"zone": "zone-a"})
	full := &sluicev1.DesiredConfig{Node: "n1", Revision: rev.GetId(), Rollout: "1-" + render.Short(rev.GetId()), Config: cfg,
		Fingerprint: render.Fingerprint(cfg), LeaderEpoch: 3, Operation: "op-1"}
	cancelled := proto.Clone(full).(*sluicev1.DesiredConfig)
	cancelled.Cancel = true
	for _, d := range []*sluicev1.DesiredConfig{full, cancelled, named("tenant-a"), {Node: "n1", Config: &sluicev1.NodeConfig{}, Fingerprint: render.Fingerprint(&sluicev1.NodeConfig{})}} {
		b, err := store.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "garbage{", "{}", `{"node":"n1","config":{}}`, `{"node":"n1","fingerprint":"x","config":{"intents":[{"name":"a","layer2Network":{"vlna":100}}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeDesired("n1", data)
		if err != nil {
			if d != nil || !strings.HasPrefix(err.Error(), "it does not decode: ") && !strings.HasPrefix(err.Error(), "not well-formed for its key: ") {
				t.Fatalf("refused value: config %v, error %q", d, err)
			}
			return
		}
		// What the agent accepts, every other service reads the same and
		// finds well-formed (pkg/store applies the same rule).
		lenient := &sluicev1.DesiredConfig{}
		if err := store.Decode(contract.BucketNodeConfigs, contract.DesiredKey("n1"), data, lenient); err != nil || !proto.Equal(d, lenient) {
			t.Fatalf("the agent reads %v, the other services %v (%v)", d, lenient, err)
		}
		b, err := store.Marshal(d)
		if err != nil {
			t.Fatalf("%v does not encode: %v", d, err)
		}
		again, err := decodeDesired("n1", b)
		if err != nil || !proto.Equal(d, again) {
			t.Fatalf("round trip of %v: %v (%v)", d, again, err)
		}
	})
}
