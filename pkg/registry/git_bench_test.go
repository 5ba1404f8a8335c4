package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// benchRepo is a repository of files intent files under intents/ on main,
// made by commits commits: the first adds them all, each later one changes
// one file.
func benchRepo(b *testing.B, files, commits int) *gittest.Repo {
	b.Helper()
	g := gittest.New(b)
	var s strings.Builder
	doc := func(i, vlan int) string {
		return fmt.Sprintf("kind: Layer2Network\nname: net-%05d\nspec: {vlan: %d, vni: %d}\n", i, vlan, 100000+i)
	}
	blob := func(data string) { fmt.Fprintf(&s, "data %d\n%s\n", len(data), data) }
	for c := range commits {
		msg := fmt.Sprintf("commit %d", c)
		fmt.Fprintf(&s, "commit refs/heads/main\ncommitter %s %d +0000\n", gittest.Author, 1_700_000_000+c)
		blob(msg)
		// No "from": fast-import continues the branch it last committed to.
		if c == 0 {
			for i := range files {
				fmt.Fprintf(&s, "M 100644 inline intents/net-%05d.yaml\n", i)
				blob(doc(i, 1+i%4000))
			}
		} else {
			i := c % files
			fmt.Fprintf(&s, "M 100644 inline intents/net-%05d.yaml\n", i)
			blob(doc(i, 1+(i+c)%4000))
		}
	}
	g.Import(s.String())
	return g
}

// BenchmarkGit_5000Files1000Commits: the read of a registry's first sync
// (a registry opened anew reads and parses every file) and of a sync that
// finds the branch unchanged, on a repository of 5,000 intent files and
// 1,000 commits. The configurator's merge of the answer is not included.
func BenchmarkGit_5000Files1000Commits(b *testing.B) {
	g := benchRepo(b, 5000, 1000)
	src := &sluicev1.GitRegistry{Url: g.URL(), Path: "intents"}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			r := open(b, src)
			snap, err := r.Fetch(context.Background())
			if err != nil || len(snap.Documents) != 5000 {
				b.Fatalf("fetch: %d documents, %v", len(snap.Documents), err)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		r := open(b, src)
		if _, err := r.Fetch(context.Background()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := r.Fetch(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGitRemote_5000Files1000Commits: the same repository served over
// HTTP by git http-backend on loopback: a first sync (a clone into an empty
// cache, then the read) and a sync that fetches an unchanged branch.
func BenchmarkGitRemote_5000Files1000Commits(b *testing.B) {
	g := benchRepo(b, 5000, 1000)
	srv := g.Serve(gittest.ServeOptions{})
	src := &sluicev1.GitRegistry{Url: srv.URL, Path: "intents"}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			r := openRemote(b, "bench", b.TempDir(), src)
			snap, err := r.Fetch(context.Background())
			if err != nil || len(snap.Documents) != 5000 {
				b.Fatalf("fetch: %d documents, %v", len(snap.Documents), err)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		r := openRemote(b, "bench", b.TempDir(), src)
		if _, err := r.Fetch(context.Background()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := r.Fetch(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReadGitCommits_5000Files1000Commits: what `sluice diff --git
// HEAD~1..HEAD` reads of the same repository in place: both commits'
// 5,000 files, each parsed (the NATS reads and the render per node are
// not included).
func BenchmarkReadGitCommits_5000Files1000Commits(b *testing.B) {
	g := benchRepo(b, 5000, 1000)
	spec := &sluicev1.RegistrySpec{Name: "bench", Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: g.URL(), Path: "intents"}}}
	for b.Loop() {
		trees, _, err := registry.ReadGitCommits(context.Background(), spec, "HEAD~1", "HEAD")
		if err != nil || len(trees) != 2 || len(trees[1].Snapshot.Documents) != 5000 {
			b.Fatalf("read: %v", err)
		}
	}
}
