package chaos

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	sreg "github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The seeds of 1–200 whose registry is a Redis one: half the registry
// seeds, drawn from a source of their own (pickRedis), so that every other
// draw of every seed stays what it was. A change to this list changes
// which registry those seeds run against.
func TestPick_RedisRegistriesAreDrawnFromTheirOwnSource(t *testing.T) {
	want := []uint64{9, 12, 17, 19, 35, 39, 43, 46, 49, 50, 54, 55, 61, 67, 69, 84, 88, 99, 107, 108, 110, 114, 115,
		136, 139, 144, 146, 148, 149, 152, 155, 157, 159, 161, 162, 169, 170, 174, 180, 197, 200}
	var got, dirs []uint64
	for seed := uint64(1); seed <= 200; seed++ {
		sc := Pick(seed)
		switch {
		case sc.Registry == nil:
		case sc.Registry.Redis:
			got = append(got, seed)
		default:
			dirs = append(dirs, seed)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Redis registries in seeds 1–200: %v\nwant %v", got, want)
	}
	// Every kind of registry fault runs against Redis somewhere.
	kinds := map[string]bool{}
	for _, seed := range got {
		for _, f := range Pick(seed).Faults {
			switch {
			case f.Trickle != nil:
				kinds[f.Trickle.Drop] = true
				kinds[cmp.Or(f.Trickle.Shape, "trickle")] = true
			case f.Hold != nil:
				kinds["hold"] = true
			case f.Pending != nil:
				kinds["confirm-pending"] = true
			}
		}
	}
	for _, k := range []string{"trickle", "refill", "stall", "flap", "gone", "hold", "confirm-pending"} {
		if !kinds[k] {
			t.Errorf("no Redis seed of 1–200 draws a %s registry fault", k)
		}
	}
	t.Logf("directory and git registries in seeds 1–200: %v", dirs)
}

// The seeds of 1–200 whose registry is a git one: half the registry seeds
// that are not Redis ones, drawn from a source of their own (pickGit), and
// each of them draws a registry-rewind. Every other draw stays as it was:
// the faults of a git seed are a directory seed's plus the rewind.
func TestPick_GitRegistriesAreDrawnFromTheirOwnSource(t *testing.T) {
	want := []uint64{13, 28, 60, 117, 124, 138, 140, 145, 163, 195}
	var got []uint64
	kinds := map[string]bool{}
	for seed := uint64(1); seed <= 200; seed++ {
		sc := Pick(seed)
		rewinds := 0
		for _, f := range sc.Faults {
			if f.Kind == RegistryRewind {
				rewinds++
			}
		}
		if sc.Registry == nil || !sc.Registry.Git {
			if rewinds > 0 {
				t.Errorf("seed %d draws a registry-rewind without a git registry", seed)
			}
			continue
		}
		got = append(got, seed)
		if sc.Registry.Redis {
			t.Errorf("seed %d: a git registry and a Redis one", seed)
		}
		if rewinds != 1 {
			t.Errorf("seed %d: a git registry with %d registry-rewinds, want 1", seed, rewinds)
		}
		for _, f := range sc.Faults {
			switch {
			case f.Trickle != nil:
				kinds[f.Trickle.Drop] = true
			case f.Hold != nil:
				kinds["hold"] = true
			case f.Pending != nil:
				kinds["confirm-pending"] = true
			case f.Rewind != nil:
				if missing := sc.Registry.Intents - f.Rewind.Keep; missing < 1 || missing > sc.Registry.Intents/2 || f.Rewind.For <= registrySettle {
					t.Errorf("seed %d: %s: lacks %d of %d intents for %s", seed, f, missing, sc.Registry.Intents, f.Rewind.For)
				}
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("git registries in seeds 1–200: %v\nwant %v", got, want)
	}
	for _, k := range []string{"some", "all", "gone", "hold", "confirm-pending"} {
		if !kinds[k] {
			t.Errorf("no git seed of 1–200 draws a %s registry fault", k)
		}
	}
}

// A git registry's rewind force-pushes the branch to the older commit
// holding the first intents only, and restore puts the head back.
func TestGitStore_RewindRestore(t *testing.T) {
	g := newGitStore(t.TempDir())
	if err := g.fill(4); err != nil {
		t.Fatal(err)
	}
	if err := g.drop(0); err != nil {
		t.Fatal(err)
	}
	want := func(step string, w ...int) {
		t.Helper()
		got, err := g.list()
		if err != nil || !slices.Equal(got, w) {
			t.Fatalf("%s: the branch holds %v (%v), want %v", step, got, err, w)
		}
	}
	if _, _, err := g.rewind(2); err != nil {
		t.Fatal(err)
	}
	want("rewound", 0, 1)
	if err := g.restore(); err != nil {
		t.Fatal(err)
	}
	want("restored", 1, 2, 3)
}

// Both stores do what the registry faults ask of them: an intent dropped
// is out of the registry and back when brought back; a registry that
// vanished comes back empty and fills up again.
func TestRegStore_DropBackVanishReappear(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) regStore
	}{
		{"directory", func(t *testing.T) regStore { return newDirStore(t.TempDir(), true) }},
		{"redis", func(t *testing.T) regStore { return newRedisStore(t) }},
		{"git", func(t *testing.T) regStore { return newGitStore(t.TempDir()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.new(t)
			want := func(step string, w ...int) {
				t.Helper()
				got, err := st.list()
				if err != nil || !slices.Equal(got, w) {
					t.Fatalf("%s: the registry holds %v (%v), want %v", step, got, err, w)
				}
			}
			if err := st.fill(3); err != nil {
				t.Fatal(err)
			}
			want("filled", 0, 1, 2)
			if err := st.drop(1); err != nil {
				t.Fatal(err)
			}
			want("reg-2 dropped", 0, 2)
			if err := st.back(1); err != nil {
				t.Fatal(err)
			}
			want("reg-2 back", 0, 1, 2)
			if err := st.vanish(); err != nil {
				t.Fatal(err)
			}
			if err := st.reappear(); err != nil {
				t.Fatal(err)
			}
			want("back after vanishing", []int(nil)...)
			for _, i := range []int{2, 0} {
				if err := st.back(i); err != nil {
					t.Fatal(err)
				}
			}
			want("refilled", 0, 2)
		})
	}
}

// The git store's faults read, through the configurator's own git
// registry, as docs/chaos.md says: a drop and a return are answers; the
// repository gone is unreachable; put back rewound to the root commit it
// is held, and so is every return committed on that rewritten branch,
// until the last one merges the old head in and the branch syncs again;
// a rewind is held until restored.
func TestGitStore_AnswersAsTheGitRegistryReadsThem(t *testing.T) {
	g := newGitStore(t.TempDir())
	if err := g.fill(3); err != nil {
		t.Fatal(err)
	}
	spec := &sluicev1.RegistrySpec{Name: registryName, SyncInterval: durationpb.New(registrySync)}
	g.source(spec)
	reg, err := sreg.Open(spec, sreg.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	answer := func(step string, want ...string) {
		t.Helper()
		snap, err := reg.Fetch(context.Background())
		var got []string
		for _, d := range snap.Documents {
			got = append(got, d.Origin)
		}
		switch {
		case len(want) == 1 && want[0] == "held":
			if !errors.Is(err, sreg.ErrHeld) {
				t.Fatalf("%s: answer %v (%v), want it held", step, got, err)
			}
		case len(want) == 1 && want[0] == "unreachable":
			if err == nil || errors.Is(err, sreg.ErrHeld) {
				t.Fatalf("%s: answer %v (%v), want an error", step, got, err)
			}
		case err != nil || !slices.Equal(got, want):
			t.Fatalf("%s: answer %v (%v), want %v", step, got, err, want)
		}
	}
	answer("filled", "reg-1.yaml", "reg-2.yaml", "reg-3.yaml")
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("drop", g.drop(1))
	answer("reg-2 dropped", "reg-1.yaml", "reg-3.yaml")
	step("back", g.back(1))
	answer("reg-2 back", "reg-1.yaml", "reg-2.yaml", "reg-3.yaml")
	step("vanish", g.vanish())
	answer("gone", "unreachable")
	step("reappear", g.reappear())
	answer("back rewound to the root commit", "held")
	step("back", g.back(2))
	step("back", g.back(0))
	answer("two of three back on the rewritten branch", "held")
	step("back", g.back(1))
	answer("all back, the old head merged in", "reg-1.yaml", "reg-2.yaml", "reg-3.yaml")
	_, _, err = g.rewind(1)
	step("rewind", err)
	answer("rewound to the commit holding reg-1", "held")
	step("restore", g.restore())
	answer("restored", "reg-1.yaml", "reg-2.yaml", "reg-3.yaml")
}
