package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A registry opened anew and given the stored commit in force holds a
// head that does not descend from it, as the registry that read it would;
// one told the commit is unknown holds every head; a seed is no answer,
// and an answer read is not replaced by a later seed.
func TestGit_SeededCommitInForce_HoldsWhatDoesNotDescend(t *testing.T) {
	g := gittest.New(t)
	c1 := g.Commit("a", map[string]string{"intents/a.yaml": tenantAYAML})
	c2 := g.Commit("b", map[string]string{"intents/b.yaml": tenantBYAML})
	src := &sluicev1.GitRegistry{Url: g.URL(), Path: "intents"}
	seed := func(t *testing.T, r registry.Registry) registry.InForceSeeder {
		t.Helper()
		s, ok := r.(registry.InForceSeeder)
		if !ok {
			t.Fatalf("%T is no InForceSeeder", r)
		}
		return s
	}

	tests := []struct {
		name    string
		given   func(t *testing.T, s registry.InForceSeeder)
		head    string
		wantErr string // "" = the answer at head
	}{
		{name: "head is the seed", given: func(t *testing.T, s registry.InForceSeeder) { mustSeed(t, s, c2) }, head: c2},
		{name: "head descends from the seed", given: func(t *testing.T, s registry.InForceSeeder) { mustSeed(t, s, c1) }, head: c2},
		{name: "head rewound behind the seed", given: func(t *testing.T, s registry.InForceSeeder) { mustSeed(t, s, c2) }, head: c1,
			wantErr: "was rewound: its head " + c1[:12]},
		{name: "seed not in the repository", given: func(t *testing.T, s registry.InForceSeeder) { mustSeed(t, s, strings.Repeat("ab", 20)) }, head: c2,
			wantErr: "was rewritten"},
		{name: "commit in force unknown", given: func(t *testing.T, s registry.InForceSeeder) { s.HoldUnknown("its record is lost") }, head: c2,
			wantErr: "is not known (its record is lost): its head " + c2[:12]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g.ForcePush(tt.head)
			r := open(t, src)
			tt.given(t, seed(t, r))
			snap, err := r.Fetch(context.Background())
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("fetch: %v", err)
			case tt.wantErr == "" && snap.Commit.GetHash() != tt.head:
				t.Errorf("answer at %s, want %s", snap.Commit.GetHash(), tt.head)
			case tt.wantErr != "" && (!errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("fetch error %v, want held saying %q", err, tt.wantErr)
			}
		})
	}
	g.ForcePush(c2)

	t.Run("a seed after an answer changes nothing", func(t *testing.T) {
		r := open(t, src)
		fetch(t, r)
		mustSeed(t, seed(t, r), c1)
		seed(t, r).HoldUnknown("too late")
		if snap := fetch(t, r); snap.Commit.GetHash() != c2 {
			t.Errorf("answer at %s, want %s", snap.Commit.GetHash(), c2)
		}
	})
	t.Run("a seed that is no hash is refused", func(t *testing.T) {
		if err := seed(t, open(t, src)).SeedInForce("c2"); err == nil || !strings.Contains(err.Error(), "not a commit hash") {
			t.Errorf("SeedInForce(\"c2\") = %v, want it refused", err)
		}
	})
}

func mustSeed(t *testing.T, s registry.InForceSeeder, hash string) {
	t.Helper()
	if err := s.SeedInForce(hash); err != nil {
		t.Fatal(err)
	}
}
