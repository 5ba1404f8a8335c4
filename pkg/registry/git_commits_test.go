package registry_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ReadGitCommits reads a git registry at any two commits of its branch as
// a sync reads the head, from the repository in place or a server's
// fetched into memory: a commit before the path existed holds no intent,
// HEAD is the branch's head, and a revision that names no commit is
// ErrNoCommit; a registry that is not git is ErrNotGit.
func TestReadGitCommits_InPlaceAndFromAServer(t *testing.T) {
	g := gittest.New(t)
	c0 := g.Commit("readme", map[string]string{"README.md": "intents to come"})
	c1 := g.Commit("tenant a", map[string]string{"intents/a.yaml": tenantAYAML})
	c2 := g.Commit("tenant b", map[string]string{"intents/b.yaml": tenantBYAML})
	srv := g.Serve(gittest.ServeOptions{})
	for _, url := range []string{g.URL(), srv.URL} {
		spec := &sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: url, Path: "intents"}}}
		trees, location, err := registry.ReadGitCommits(context.Background(), spec, c0[:8], "HEAD~1", "HEAD")
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if location != url+" branch main path intents" {
			t.Errorf("%s: location %q", url, location)
		}
		var got [][]string
		for _, tr := range trees {
			got = append(got, docIDs(tr.Snapshot))
		}
		want := [][]string{{}, {"a.yaml=layer2network/tenant-a"}, {"a.yaml=layer2network/tenant-a", "b.yaml=layer2network/tenant-b"}}
		if !slices.EqualFunc(got, want, slices.Equal) || !trees[0].NoPath || trees[1].NoPath ||
			trees[0].Commit.GetHash() != c0 || trees[1].Commit.GetHash() != c1 || trees[2].Commit.GetHash() != c2 || trees[2].Commit.GetSubject() != "tenant b" {
			t.Errorf("%s: documents %q (no path %t %t), commits %s %s %s; want %q at %s %s %s", url, got, trees[0].NoPath, trees[1].NoPath,
				trees[0].Commit.GetHash(), trees[1].Commit.GetHash(), trees[2].Commit.GetHash(), want, c0, c1, c2)
		}
		if _, _, err := registry.ReadGitCommits(context.Background(), spec, "main", "nosuch"); !errors.Is(err, registry.ErrNoCommit) {
			t.Errorf("%s: a revision that names no commit: %v, want ErrNoCommit", url, err)
		}
	}
	dir := &sluicev1.RegistrySpec{Name: "plain", Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: t.TempDir()}}}
	if _, _, err := registry.ReadGitCommits(context.Background(), dir, "HEAD"); !errors.Is(err, registry.ErrNotGit) {
		t.Errorf("a directory registry: %v, want ErrNotGit", err)
	}
}
