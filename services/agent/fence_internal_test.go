package agent

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/events"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestAccept_LeaderEpochFence covers the reader side of fencing: a desired
// config written under a lower leader epoch than one already accepted is
// never handed to the worker; epoch 0 (an older coordinator) always is.
func TestAccept_LeaderEpochFence(t *testing.T) {
	type in struct {
		fp    string
		epoch uint64
		rev   uint64
	}
	tests := []struct {
		name      string
		given     []in
		want      []string // fingerprints handed to the worker, in order
		wantEpoch uint64
	}{
		{name: "rising epochs are accepted", given: []in{{"a", 3, 1}, {"b", 3, 2}, {"c", 4, 3}}, want: []string{"a", "b", "c"}, wantEpoch: 4},
		{name: "lower epoch after a higher one is ignored", given: []in{{"a", 7, 1}, {"b", 5, 2}}, want: []string{"a"}, wantEpoch: 7},
		{name: "epoch 0 is accepted and lowers nothing", given: []in{{"a", 7, 1}, {"b", 0, 2}, {"c", 6, 3}}, want: []string{"a", "b"}, wantEpoch: 7},
		{name: "only epoch 0 (old coordinator)", given: []in{{"a", 0, 1}, {"b", 0, 2}}, want: []string{"a", "b"}, wantEpoch: 0},
		{name: "stale then current again", given: []in{{"a", 7, 1}, {"b", 6, 2}, {"c", 8, 3}}, want: []string{"a", "c"}, wantEpoch: 8},
		{name: "no fingerprint is never applied", given: []in{{"", 7, 1}}, want: nil, wantEpoch: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Conn: &nats.Conn{}, Node: "n1", Applier: NewFileApplier(t.TempDir() + "/c.json")})
			if err != nil {
				t.Fatal(err)
			}
			a.em = events.NewEmitter(nil, zerolog.Nop(), Component, nil)
			var got []string
			for _, g := range tt.given {
				a.accept(desired{cfg: &sluicev1.DesiredConfig{Node: "n1", Fingerprint: g.fp, LeaderEpoch: g.epoch}, rev: g.rev}, "test")
				if d, ok := a.box.take(); ok {
					got = append(got, d.cfg.GetFingerprint())
				}
			}
			if !slices.Equal(got, tt.want) || a.in.epoch != tt.wantEpoch {
				t.Fatalf("handed %v with epoch %d; want %v with epoch %d", got, a.in.epoch, tt.want, tt.wantEpoch)
			}
		})
	}
}
