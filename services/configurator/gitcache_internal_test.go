package configurator

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func remoteSpec(name, url string) *sluicev1.RegistrySpec {
	return &sluicev1.RegistrySpec{Name: name, Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: url}}}
}

func TestStaleClones(t *testing.T) {
	const urlA, urlB = "https://git.example.net/a.git", "https://git.example.net/b.git"
	dirA, dirB := registry.CloneDir(remoteSpec("gitops", urlA)), registry.CloneDir(remoteSpec("gitops", urlB))
	live := func(spec *sluicev1.RegistrySpec) store.Entry[*sluicev1.RegistrySpec] {
		return store.Entry[*sluicev1.RegistrySpec]{Key: contract.RegistryKey(spec.GetName()), Value: spec}
	}
	deleted := store.Entry[*sluicev1.RegistrySpec]{Key: contract.RegistryKey("gitops"), Deleted: true}
	dir := func(name string) cacheEntry { return cacheEntry{name: name, mode: fs.ModeDir} }
	tests := []struct {
		name    string
		entries []cacheEntry
		specs   []store.Entry[*sluicev1.RegistrySpec]
		inUse   []string
		want    []string
	}{
		{name: "the clone of a live spec stays", entries: []cacheEntry{dir(dirA)}, specs: []store.Entry[*sluicev1.RegistrySpec]{live(remoteSpec("gitops", urlA))}},
		{name: "a deleted spec's clone goes", entries: []cacheEntry{dir(dirA)}, specs: []store.Entry[*sluicev1.RegistrySpec]{deleted}, want: []string{dirA}},
		{name: "a changed URL's old clone goes", entries: []cacheEntry{dir(dirA), dir(dirB)}, specs: []store.Entry[*sluicev1.RegistrySpec]{live(remoteSpec("gitops", urlB))}, want: []string{dirA}},
		{name: "now a directory registry: the clone goes", entries: []cacheEntry{dir(dirA)},
			specs: []store.Entry[*sluicev1.RegistrySpec]{live(&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: "/x"}}})},
			want:  []string{dirA}},
		{name: "an empty listing removes nothing", entries: []cacheEntry{dir(dirA), dir(dirB)}},
		{name: "a name the store does not know stays", entries: []cacheEntry{dir(dirA)}, specs: []store.Entry[*sluicev1.RegistrySpec]{live(remoteSpec("other", urlA))}},
		{name: "an undecodable spec keeps its clones", entries: []cacheEntry{dir(dirA)},
			specs: []store.Entry[*sluicev1.RegistrySpec]{{Key: contract.RegistryKey("gitops"), Err: errors.New("bad")}}},
		{name: "a clone in use stays", entries: []cacheEntry{dir(dirA)}, specs: []store.Entry[*sluicev1.RegistrySpec]{deleted}, inUse: []string{dirA}},
		{name: "a symlink, a file and a foreign name stay",
			entries: []cacheEntry{{name: dirA, mode: fs.ModeSymlink}, {name: dirB}, dir("gitops.git"), dir("gitops-XYZ.git"), dir("notes")},
			specs:   []store.Entry[*sluicev1.RegistrySpec]{deleted}},
		{name: "a confirmation key is not a spec", entries: []cacheEntry{dir(dirA)},
			specs: []store.Entry[*sluicev1.RegistrySpec]{live(remoteSpec("gitops", urlA)), {Key: contract.RegistryConfirmKey("gitops"), Deleted: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, s := range staleClones(tt.entries, tt.specs, tt.inUse) {
				got = append(got, s.dir)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("stale = %q, want %q", got, tt.want)
			}
		})
	}
}

// A listing of the registries that fails, or answers nothing, is no
// evidence that any registry was removed: every clone stays.
func TestPruneOnce_ListFailsOrIsEmpty_KeepsEveryClone(t *testing.T) {
	cache := t.TempDir()
	clone := filepath.Join(cache, registry.CloneDir(remoteSpec("gitops", "https://git.example.net/a.git")))
	if err := os.Mkdir(clone, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		list    []store.Entry[*sluicev1.RegistrySpec]
		err     error
		wantErr bool
	}{
		{name: "list fails", err: errors.New("list control: no answer"), wantErr: true},
		{name: "list is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &registries{log: zerolog.New(zerolog.NewTestWriter(t)), cfg: registriesConfig{gitCache: cache}, running: map[string]*syncer{},
				listSpecs: func(context.Context, string) ([]store.Entry[*sluicev1.RegistrySpec], error) { return tt.list, tt.err }}
			if err := r.pruneOnce(context.Background()); (err != nil) != tt.wantErr {
				t.Errorf("pruneOnce: %v, want an error: %v", err, tt.wantErr)
			}
			if _, err := os.Stat(clone); err != nil {
				t.Errorf("the clone after a listing that %s: %v, want it kept", tt.name, err)
			}
		})
	}
}
