package configurator_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// The clone of a registry whose URL changed, and then of the registry
// removed, leaves the git cache, each logged once; what else is in the
// cache stays: a directory of another form, the clone of a registry the
// store knows nothing of, and a symbolic link with a stale clone's name
// (never followed: its target stays whole).
func TestGitCache_RemovedOrMovedRegistry_ItsCloneIsRemoved_ForeignEntriesStay(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	srvA, srvB := g.Serve(gittest.ServeOptions{}), g.Serve(gittest.ServeOptions{}) // one repository, two URLs
	cache := t.TempDir()

	// "gone" was a registry, removed before the configurator starts: its
	// delete marker is in the store. A link with its clone's name stays.
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	addRegistry(t, env, dirSpec("gone", t.TempDir()))
	e, err := specs.Get(context.Background(), contract.RegistryKey("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := specs.Delete(context.Background(), contract.RegistryKey("gone"), e.Revision); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(cache, registry.CloneDir(gitSpec("gone", srvA.URL)))
	foreign := []string{filepath.Join(cache, "notes"), filepath.Join(cache, "other-0123456789abcdef.git")}
	for _, d := range foreign {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	start(t, env, func(c *configurator.Config) {
		c.GitCache = cache
		c.Log = zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t)))
	})
	addRegistry(t, env, gitSpec("gitops", srvA.URL))
	cloneA := filepath.Join(cache, registry.CloneDir(gitSpec("gitops", srvA.URL)))
	cloneB := filepath.Join(cache, registry.CloneDir(gitSpec("gitops", srvB.URL)))
	synced := func(url string) func() bool {
		return func() bool {
			st := registryStatus(t, env, "gitops")
			return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && strings.Contains(st.GetLocation(), url)
		}
	}
	natstest.Eventually(t, wait, "gitops synced from the first URL", synced(srvA.URL))
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	if !exists(cloneA) {
		t.Fatalf("no clone at %s", cloneA)
	}

	// The URL changes: the new clone is made, the old one removed.
	e2, err := specs.Get(context.Background(), contract.RegistryKey("gitops"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := specs.Update(context.Background(), contract.RegistryKey("gitops"), gitSpec("gitops", srvB.URL), e2.Revision); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, "gitops synced from the second URL", synced(srvB.URL))
	natstest.Eventually(t, wait, "the first URL's clone removed", func() bool { return !exists(cloneA) })
	if !exists(cloneB) {
		t.Fatalf("no clone at %s", cloneB)
	}

	// The registry removed: its clone goes.
	e3, err := specs.Get(context.Background(), contract.RegistryKey("gitops"))
	if err != nil {
		t.Fatal(err)
	}
	if err := specs.Delete(context.Background(), contract.RegistryKey("gitops"), e3.Revision); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, "the removed registry's clone removed", func() bool { return !exists(cloneB) })

	for _, p := range append(foreign, link, filepath.Join(target, "keep")) {
		if !exists(p) {
			t.Errorf("%s was removed; want it kept (not a clone of a removed registry)", p)
		}
	}
	for _, clone := range []string{cloneA, cloneB} {
		// The line follows the removal: wait for it, then count.
		natstest.Eventually(t, wait, "the removal of "+clone+" logged", func() bool { return strings.Contains(logs.String(), `"dir":"`+clone+`"`) })
		if n := strings.Count(logs.String(), `"dir":"`+clone+`"`); n != 1 {
			t.Errorf("%d log lines name %s, want 1 (its removal)", n, clone)
		}
	}
}
