package dev

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The registries of --redis, --watch-dir and --git-dir are stored for the
// configurator on every start, replacing what an earlier start stored.
func TestDev_Registries_StoredOnEveryStartAndShownInTheBanner(t *testing.T) {
	data, watched, repo := t.TempDir(), t.TempDir(), t.TempDir()
	build := func(name string, o registryspec.Options) *sluicev1.RegistrySpec {
		spec, err := registryspec.Build(name, o, "ops@laptop", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	redis := build("redis", registryspec.Options{Redis: "redis://127.0.0.1:1/0"})
	dir := build("dir", registryspec.Options{Dir: watched})
	git := build("git", registryspec.Options{GitDir: repo})
	opts := Options{DataDir: data, Listen: "127.0.0.1:-1", Stderr: io.Discard, Registries: []*sluicev1.RegistrySpec{redis, dir, git}}

	s := start(t, opts)
	specs := store.New(connect(t, s).b.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	for _, want := range []*sluicev1.RegistrySpec{redis, dir, git} {
		e, err := specs.Get(context.Background(), contract.RegistryKey(want.GetName()))
		if err != nil || !proto.Equal(e.Value, want) {
			t.Errorf("registry %s stored as %v, %v; want %v", want.GetName(), e.Value, err, want)
		}
	}
	banner := s.Banner()
	for _, want := range []string{
		"registry  redis: redis://127.0.0.1:1/0 (redis, ",
		"registry  dir: " + watched + " (directory, ",
		"redis-cli -u redis://127.0.0.1:1/0 SET sluice:intents:layer2network.tenant-x '{",
		"> " + watched + "/lab.yaml",
		"registry  git: " + repo + " branch main (git, ",
		"in a working tree of " + repo + " (then git push, if a clone): registry git reads branch main's head commit",
		"sluice get registries",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	// Restarting on the same data directory replaces the stored spec.
	opts.Registries = []*sluicev1.RegistrySpec{build("dir", registryspec.Options{Dir: watched, HoldShare: 0.9})}
	s = start(t, opts)
	e, err := store.New(connect(t, s).b.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).
		Get(context.Background(), contract.RegistryKey("dir"))
	if err != nil || e.Value.GetHoldShare() != 0.9 {
		t.Errorf("registry dir after the restart: %v, %v; want hold share 0.9", e.Value, err)
	}
	// redis, not given this time, is still stored and synced: the banner
	// says so, and how to stop it.
	banner = s.Banner()
	for _, want := range []string{
		"registry  dir: " + watched + " (directory, synced by the configurator)",
		"registry  redis: redis://127.0.0.1:1/0 (redis, stored by an earlier start or 'sluice registry add': synced too)",
		"'sluice registry remove NAME' stops syncing one",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner after a restart without --redis lacks %q:\n%s", want, banner)
		}
	}
}

// The secure banner's exports hold in any directory: the credentials' path
// is absolute although the data directory was given relative (as the
// README's ./.sluice-secure), and the nats CLI's NATS_CREDS is exported too.
func TestDev_SecureBanner_ExportsAbsoluteCredentialsPaths(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	s := start(t, Options{DataDir: ".sluice-secure", Listen: "127.0.0.1:-1", Stderr: io.Discard, Secure: true})
	banner := s.Banner()
	for _, want := range []string{
		"export SLUICE_NATS_CREDS=" + filepath.Join(dir, ".sluice-secure") + "/",
		"--dir " + filepath.Join(dir, ".sluice-secure"),
		"export NATS_CREDS=$SLUICE_NATS_CREDS",
	} {
		if !strings.Contains(banner, want) {
			t.Errorf("secure banner lacks %q:\n%s", want, banner)
		}
	}
}
