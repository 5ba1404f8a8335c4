package pause

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A stop removes the presence even when the beacon's revision is not the
// key's: a renewal cut short by the stop may have landed without its
// answer (the key is a revision ahead), or no revision was known.
func TestBeacon_Remove_WhateverRevisionItKnows(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // margin: a few KV writes
	defer cancel()
	insts := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	tests := []struct {
		name, instance string
		known          func(created, landed uint64) uint64
	}{
		{"its own revision", "r1", func(_, landed uint64) uint64 { return landed }},
		{"a renewal landed without its answer", "r2", func(created, _ uint64) uint64 { return created }},
		{"none known", "r3", func(uint64, uint64) uint64 { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBeacon(env.Buckets.Instances, "reaper", tt.instance, "v1", time.Hour, zerolog.Nop(), time.Now)
			created, err := b.write(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			landed, err := b.write(ctx, created)
			if err != nil {
				t.Fatal(err)
			}
			b.remove(ctx, tt.known(created, landed))
			if _, err := insts.Get(ctx, b.key); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("after the stop: err = %v, want the presence gone", err)
			}
		})
	}
}
