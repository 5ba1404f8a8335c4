package chaos

import (
	"cmp"
	"slices"
	"testing"
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
	t.Logf("directory registries in seeds 1–200: %v", dirs)
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
