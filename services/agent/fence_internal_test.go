package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// named is n1's desired config whose content is one intent called name,
// fingerprinted as the coordinator does.
func named(name string) *sluicev1.DesiredConfig {
	nc := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: name}}}
	return &sluicev1.DesiredConfig{Node: "n1", Config: nc, Fingerprint: render.Fingerprint(nc)}
}

// nameOf is the name of d's first intent (see named), "" if it has none.
func nameOf(d *sluicev1.DesiredConfig) string {
	if in := d.GetConfig().GetIntents(); len(in) > 0 {
		return in[0].GetName()
	}
	return ""
}

// TestAccept_LeaderEpochFence covers the reader side of fencing: a desired
// config written under a lower leader epoch than one already accepted is
// never handed to the worker; epoch 0 (an older coordinator) always is.
// A config that fails verify is never handed over and raises no epoch.
func TestAccept_LeaderEpochFence(t *testing.T) {
	type in struct {
		name  string // "" gives no fingerprint; "!x" content x under another fingerprint
		epoch uint64
		rev   uint64
	}
	tests := []struct {
		name      string
		given     []in
		want      []string // names handed to the worker, in order
		wantEpoch uint64
	}{
		{name: "rising epochs are accepted", given: []in{{"a", 3, 1}, {"b", 3, 2}, {"c", 4, 3}}, want: []string{"a", "b", "c"}, wantEpoch: 4},
		{name: "lower epoch after a higher one is ignored", given: []in{{"a", 7, 1}, {"b", 5, 2}}, want: []string{"a"}, wantEpoch: 7},
		{name: "epoch 0 is accepted and lowers nothing", given: []in{{"a", 7, 1}, {"b", 0, 2}, {"c", 6, 3}}, want: []string{"a", "b"}, wantEpoch: 7},
		{name: "only epoch 0 (old coordinator)", given: []in{{"a", 0, 1}, {"b", 0, 2}}, want: []string{"a", "b"}, wantEpoch: 0},
		{name: "stale then current again", given: []in{{"a", 7, 1}, {"b", 6, 2}, {"c", 8, 3}}, want: []string{"a", "c"}, wantEpoch: 8},
		{name: "no fingerprint is never applied", given: []in{{"", 7, 1}}, want: nil, wantEpoch: 0},
		{name: "a fingerprint not its content's is never applied nor raises the epoch", given: []in{{"a", 3, 1}, {"!b", 9, 2}, {"c", 4, 3}},
			want: []string{"a", "c"}, wantEpoch: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Conn: &nats.Conn{}, Node: "n1", Applier: NewFileApplier(t.TempDir() + "/c.json")})
			if err != nil {
				t.Fatal(err)
			}
			a.em = events.NewEmitter(nil, zerolog.Nop(), Component, nil)
			a.quarantine = events.NewQuarantine(a.em)
			var got []string
			for _, g := range tt.given {
				d := named(strings.TrimPrefix(g.name, "!"))
				switch {
				case g.name == "":
					d.Fingerprint = ""
				case strings.HasPrefix(g.name, "!"):
					d.Fingerprint = named("something else").Fingerprint
				}
				d.LeaderEpoch = g.epoch
				b, err := store.Marshal(d)
				if err != nil {
					t.Fatal(err)
				}
				a.intake(b, g.rev, "test")
				if d, ok := a.box.take(); ok {
					got = append(got, nameOf(d.cfg))
				}
			}
			if !slices.Equal(got, tt.want) || a.in.epoch != tt.wantEpoch {
				t.Fatalf("handed %v with epoch %d; want %v with epoch %d", got, a.in.epoch, tt.want, tt.wantEpoch)
			}
		})
	}
}

// TestDecodeDesired covers what the agent refuses before anything else
// looks at a desired config: a value that does not decode strictly, and one
// the nodeconfigs bucket's rule refuses (pkg/contract/wellformed): without
// a fingerprint or a config, one whose fingerprint is not its config's, one
// naming another node or none (a value of another type, or one copied from
// another node's key). A cancel is the same config marked cancelled, and
// passes.
func TestDecodeDesired(t *testing.T) {
	good := named("tenant-a")
	encode := func(d *sluicev1.DesiredConfig) string {
		b, err := store.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cancelled := named("tenant-a")
	cancelled.Cancel, cancelled.Operation = true, "r1/n1/apply"
	tests := []struct {
		name    string
		given   string
		wantErr string // "" = accepted
	}{
		{name: "as the coordinator writes it", given: encode(good)},
		{name: "a cancel of it", given: encode(cancelled)},
		{name: "the empty config", given: `{"node":"n1","fingerprint":"` + render.Fingerprint(&sluicev1.NodeConfig{}) + `","config":{}}`},
		{name: "no config", given: `{"node":"n1","fingerprint":"` + render.Fingerprint(&sluicev1.NodeConfig{}) + `"}`,
			wantErr: "not well-formed for its key: it carries no fingerprint or no config"},
		{name: "another node's", given: strings.Replace(encode(good), `"n1"`, `"n2"`, 1), wantErr: `it names node "n2", not "n1"`},
		{name: "no node", given: strings.Replace(encode(good), `"node":"n1",`, ``, 1), wantErr: `it names node "", not "n1"`},
		{name: "a value of another type", given: `{"holder":"x","epoch":"5"}`, wantErr: `unknown field "holder"`},
		{name: "an unknown field", given: `{"node":"n1","fingerprint":"` + good.Fingerprint + `","config":{"intents":[{"name":"tenant-a","layer2Network":{"vlna":100}}]}}`,
			wantErr: `unknown field "vlna"`},
		{name: "an unknown top-level field", given: strings.Replace(encode(good), `{`, `{"fingerprnt":"x",`, 1), wantErr: `unknown field "fingerprnt"`},
		{name: "not json", given: "garbage{", wantErr: "does not decode"},
		{name: "no fingerprint", given: `{"node":"n1","config":{}}`, wantErr: "it carries no fingerprint or no config"},
		{name: "content changed after fingerprinting", given: strings.Replace(encode(good), "tenant-a", "tenant-b", 1),
			wantErr: "its fingerprint " + render.Short(good.Fingerprint) + " does not match its config (" + render.Short(named("tenant-b").Fingerprint) + ")"},
		{name: "a fingerprint that is not hex", given: `{"node":"n1","fingerprint":"ünïcödé-fingerprint-of-any-length","config":{}}`,
			wantErr: "its fingerprint ünïcödé-fing does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeDesired("n1", []byte(tt.given))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("decode and verify %s: %v; want error containing %q", tt.given, err, tt.wantErr)
			}
		})
	}
}
