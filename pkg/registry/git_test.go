package registry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// docIDs lists each document's origin and intents: "a.yaml=layer2network/tenant-a".
func docIDs(snap registry.Snapshot) []string {
	var out []string
	for _, d := range snap.Documents {
		out = append(out, d.Origin+"="+strings.Join(ids(d), ","))
	}
	return out
}

func TestGit_IntentsAtHead_AreTheAnswer(t *testing.T) {
	g := gittest.New(t)
	head := g.Commit("tenants a and b\n\nwhy: the first two", map[string]string{
		"intents/a.yaml":     tenantAYAML,
		"intents/b.YML":      tenantBYAML,
		"intents/t100.json":  t100JSON,
		"intents/README.md":  "not an intent file\n",
		"intents/sub/c.yaml": tenantBYAML, // not read: subdirectories are not
		"other/d.yaml":       tenantBYAML, // outside the path
	})
	// Not committed: never read.
	if err := os.WriteFile(filepath.Join(g.Work, "intents", "e.yaml"), []byte(tenantBYAML), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, src := range []*sluicev1.GitRegistry{
		{Url: g.URL(), Path: "intents/"},
		{Dir: g.Bare, Path: "intents"},
		{Dir: g.Work, Branch: "main", Path: "./intents"},
	} {
		t.Run(src.GetUrl()+src.GetDir(), func(t *testing.T) {
			snap := fetch(t, open(t, src))
			want := []string{"a.yaml=layer2network/tenant-a", "b.YML=layer2network/tenant-b", "t100.json=routingtable/t100"}
			if got := docIDs(snap); !slices.Equal(got, want) {
				t.Errorf("documents = %q, want %q", got, want)
			}
			c := snap.Commit
			if c.GetHash() != head || c.GetSubject() != "tenants a and b" || c.GetAuthor() != gittest.Author || c.GetCommitter() != gittest.Author || c.GetTime() == nil {
				t.Errorf("commit = %v, want %s, its subject and author", c, head)
			}
			if snap.Version == "" {
				t.Error("no version")
			}
		})
	}
}

func TestGit_NewCommits_ChangeTheAnswer(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a and b", map[string]string{"a.yaml": tenantAYAML, "b.yaml": tenantBYAML})
	r := open(t, &sluicev1.GitRegistry{Url: g.URL()})
	v1 := fetch(t, r).Version

	// One file changed: the answer has the change, at the new commit.
	c2 := g.Commit("b: vlan 201", map[string]string{"b.yaml": strings.Replace(tenantBYAML, "200", "201", 1)})
	snap := fetch(t, r)
	if snap.Commit.GetHash() != c2 || snap.Version == v1 {
		t.Errorf("after a commit changing b.yaml: commit %s, version %s (was %s); want %s and a new version", snap.Commit.GetHash(), snap.Version, v1, c2)
	}
	if got := document(t, snap, "b.yaml").Intents[0].GetLayer2Network().GetVlan(); got != 201 {
		t.Errorf("b.yaml's vlan = %d, want 201", got)
	}
	v2 := snap.Version

	// A commit that changes no intent file: a new commit, the same version.
	c3 := g.Commit("docs", map[string]string{"README.md": "how we keep intents\n"})
	if snap := fetch(t, r); snap.Commit.GetHash() != c3 || snap.Version != v2 {
		t.Errorf("after a commit touching no intent file: commit %s, version %s; want %s and version %s", snap.Commit.GetHash(), snap.Version, c3, v2)
	}

	// One file deleted: gone from the answer (the configurator marks its
	// intents after the settle period).
	g.Commit("retire tenant-a", map[string]string{"a.yaml": ""})
	if got, want := docIDs(fetch(t, r)), []string{"b.yaml=layer2network/tenant-b"}; !slices.Equal(got, want) {
		t.Errorf("after deleting a.yaml: documents %q, want %q", got, want)
	}
}

// A branch rewound to an older commit, or rewritten, is held naming both
// commits: never an answer that drops what the newer commits added. A
// branch that descends from the commit in force again is read again.
func TestGit_ForcePush_IsHeldNamingBothCommits(t *testing.T) {
	g := gittest.New(t)
	c1 := g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	c2 := g.Commit("tenant b", map[string]string{"b.yaml": tenantBYAML})
	r := open(t, &sluicev1.GitRegistry{Url: g.URL()})
	if got := fetch(t, r).Commit.GetHash(); got != c2 {
		t.Fatalf("commit = %s, want %s", got, c2)
	}

	g.ForcePush(c1)
	_, err := r.Fetch(context.Background())
	if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "was rewound") ||
		!strings.Contains(err.Error(), c1[:12]) || !strings.Contains(err.Error(), c2[:12]) {
		t.Fatalf("after a rewind to %s: err = %v, want ErrHeld naming %s and %s", c1[:12], err, c1[:12], c2[:12])
	}

	// Rewritten: a commit on top of the older one does not descend from c2.
	g.Git(g.Work, "reset", "--quiet", "--hard", c1)
	c3 := g.Commit("tenant b, again", map[string]string{"b2.yaml": tenantBYAML})
	g.ForcePush(c3)
	_, err = r.Fetch(context.Background())
	if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "was rewritten") ||
		!strings.Contains(err.Error(), c3[:12]) || !strings.Contains(err.Error(), c2[:12]) {
		t.Fatalf("after a rewrite to %s: err = %v, want ErrHeld naming %s and %s", c3[:12], err, c3[:12], c2[:12])
	}

	// The branch back on c2's history: read again.
	g.ForcePush(c2)
	if snap := fetch(t, r); snap.Commit.GetHash() != c2 || len(snap.Documents) != 2 {
		t.Errorf("after restoring the branch: commit %s, documents %q; want %s with a.yaml and b.yaml", snap.Commit.GetHash(), origins(snap), c2)
	}

	// A registry opened anew takes the branch as it is.
	g.ForcePush(c1)
	if snap := fetch(t, open(t, &sluicev1.GitRegistry{Url: g.URL()})); snap.Commit.GetHash() != c1 {
		t.Errorf("a new registry: commit %s, want %s", snap.Commit.GetHash(), c1)
	}
}

// What cannot be read is an error, never an empty answer.
func TestGit_WhatCannotBeRead_IsAnError(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a", map[string]string{"intents/a.yaml": tenantAYAML})
	tests := []struct {
		name    string
		given   *sluicev1.GitRegistry
		before  func()
		wantErr string
	}{
		{name: "missing repository", given: &sluicev1.GitRegistry{Url: "file://" + filepath.Join(t.TempDir(), "gone.git")},
			wantErr: "open repository"},
		{name: "missing branch", given: &sluicev1.GitRegistry{Url: g.URL(), Branch: "release"},
			wantErr: "branch release: not found in repository " + g.Bare},
		{name: "missing path", given: &sluicev1.GitRegistry{Url: g.URL(), Path: "network"},
			wantErr: "path network: not a directory at commit"},
		{name: "path is a file", given: &sluicev1.GitRegistry{Url: g.URL(), Path: "intents/a.yaml"},
			wantErr: "path intents/a.yaml: not a directory at commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := open(t, tt.given).Fetch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one with %q", err, tt.wantErr)
			}
			if len(snap.Documents) != 0 || snap.Version != "" || snap.Commit != nil {
				t.Errorf("an error came with a snapshot: %+v", snap)
			}
		})
	}
}

// A repository, a branch or a path that disappears after an answer is an
// error (a path gone in a commit: held), not an empty answer.
func TestGit_VanishingAfterAnAnswer_IsAnError(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a", map[string]string{"intents/a.yaml": tenantAYAML})
	g.Git(g.Work, "push", "--quiet", "origin", "main:release")
	r := open(t, &sluicev1.GitRegistry{Url: g.URL(), Branch: "release", Path: "intents"})
	fetch(t, r)

	g.Commit("move the intents", map[string]string{"intents/a.yaml": "", "net/a.yaml": tenantAYAML})
	g.Git(g.Work, "push", "--quiet", "--force", "origin", "main:release")
	if _, err := r.Fetch(context.Background()); !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "path intents is not a directory") {
		t.Errorf("path gone: err = %v, want ErrHeld naming the path", err)
	}
	g.Git(g.Work, "push", "--quiet", "origin", ":release")
	if _, err := r.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "branch release: not found") {
		t.Errorf("branch gone: err = %v, want one naming the branch", err)
	}
	if err := os.RemoveAll(g.Bare); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "open repository "+g.Bare) {
		t.Errorf("repository gone: err = %v, want one naming it", err)
	}
}

// A file over intent.MaxFileSize, a symbolic link and a file that does not
// parse are documents in error; the other files read as usual.
func TestGit_BadFiles_AreDocumentsInError(t *testing.T) {
	g := gittest.New(t)
	if err := os.Symlink("a.yaml", filepath.Join(g.Work, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	g.Git(g.Work, "add", "link.yaml")
	g.Commit("files", map[string]string{"a.yaml": tenantAYAML, "broken.yaml": brokenYAML,
		"big.yaml": strings.Repeat("#", 16<<20+1)})
	snap := fetch(t, open(t, &sluicev1.GitRegistry{Dir: g.Bare}))
	tests := []struct {
		origin  string
		want    []string
		wantErr string
	}{
		{origin: "a.yaml", want: []string{"layer2network/tenant-a"}},
		{origin: "big.yaml", wantErr: "big.yaml is 16,777,217 bytes, over the limit of 16,777,216 bytes (16 MiB)"},
		{origin: "broken.yaml", wantErr: "broken.yaml"},
		{origin: "link.yaml", wantErr: "link.yaml is a symbolic link in the repository, not a file: skipped"},
	}
	if got := origins(snap); !slices.Equal(got, []string{"a.yaml", "big.yaml", "broken.yaml", "link.yaml"}) {
		t.Fatalf("origins = %q", got)
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			d := document(t, snap, tt.origin)
			if got := ids(d); !slices.Equal(got, tt.want) {
				t.Errorf("intents = %q, want %q", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && d.Err != nil:
				t.Errorf("err = %v, want none", d.Err)
			case tt.wantErr != "" && (d.Err == nil || !strings.Contains(d.Err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one with %q", d.Err, tt.wantErr)
			}
		})
	}
}

// The answer given again for an unchanged tree is a copy: what the caller
// does with one answer never changes the next.
func TestGit_UnchangedTree_AnswersACopy(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a", map[string]string{"a.yaml": tenantAYAML})
	r := open(t, &sluicev1.GitRegistry{Url: g.URL()})
	fetch(t, r).Documents[0].Intents[0].Name = "changed"
	if got := ids(fetch(t, r).Documents[0]); !slices.Equal(got, []string{"layer2network/tenant-a"}) {
		t.Errorf("second answer = %q, want the intent as committed", got)
	}
}

func TestGit_KindAndLocation(t *testing.T) {
	tests := []struct {
		given *sluicev1.GitRegistry
		want  string
	}{
		{given: &sluicev1.GitRegistry{Url: "file:///srv/git/net.git"}, want: "file:///srv/git/net.git branch main"},
		{given: &sluicev1.GitRegistry{Dir: "/srv/git/net/", Branch: "prod", Path: "intents/"}, want: "/srv/git/net branch prod path intents"},
	}
	for _, tt := range tests {
		r := open(t, tt.given)
		if r.Kind() != "git" || r.Location() != tt.want {
			t.Errorf("kind %q, location %q; want git, %q", r.Kind(), r.Location(), tt.want)
		}
	}
}

func TestCheck_Git(t *testing.T) {
	tests := []struct {
		name    string
		given   *sluicev1.GitRegistry
		wantErr string
	}{
		{name: "url", given: &sluicev1.GitRegistry{Url: "file:///srv/git/net.git", Branch: "release/2026", Path: "intents/"}},
		{name: "dir", given: &sluicev1.GitRegistry{Dir: "/srv/git/net"}},
		{name: "neither", given: &sluicev1.GitRegistry{}, wantErr: "git.url: required"},
		{name: "both", given: &sluicev1.GitRegistry{Url: "file:///a", Dir: "/a"}, wantErr: "git: give git.url or git.dir, not both"},
		{name: "https", given: &sluicev1.GitRegistry{Url: "https://git.example/net.git", TokenFile: "/etc/sluice/git-token", CaFile: "/etc/sluice/ca.pem"}},
		{name: "https with a user", given: &sluicev1.GitRegistry{Url: "https://oauth2@git.example/net.git", TokenFile: "/etc/sluice/git-token"}},
		{name: "http", given: &sluicev1.GitRegistry{Url: "http://git.example/net.git"}},
		{name: "ssh", given: &sluicev1.GitRegistry{Url: "ssh://git@git.example/net.git", SshKeyFile: "/etc/sluice/git-key", KnownHostsFile: "/etc/sluice/known_hosts"}},
		{name: "ssh without a key", given: &sluicev1.GitRegistry{Url: "ssh://git@git.example/net.git", KnownHostsFile: "/k"}, wantErr: "git.ssh_key_file: required with an ssh:// URL"},
		{name: "ssh without known hosts", given: &sluicev1.GitRegistry{Url: "ssh://git@git.example/net.git", SshKeyFile: "/k"}, wantErr: "git.known_hosts_file: required with an ssh:// URL"},
		{name: "ssh with a token", given: &sluicev1.GitRegistry{Url: "ssh://git.example/net.git", SshKeyFile: "/k", KnownHostsFile: "/h", TokenFile: "/t"}, wantErr: "git.token_file and git.ca_file go with an https:// URL, not ssh://"},
		{name: "key with https", given: &sluicev1.GitRegistry{Url: "https://git.example/net.git", SshKeyFile: "/k"}, wantErr: "git.ssh_key_file and git.known_hosts_file go with an ssh:// URL"},
		{name: "git protocol", given: &sluicev1.GitRegistry{Url: "git://git.example/net.git"}, wantErr: `git.url: "git://git.example/net.git": give an https://, http:// or ssh:// URL`},
		{name: "password in https", given: &sluicev1.GitRegistry{Url: "https://ada:s3cret@git.example/net.git"}, wantErr: `git.url: "https://git.example/net.git" carries a password`},
		{name: "token over http", given: &sluicev1.GitRegistry{Url: "http://git.example/net.git", TokenFile: "/t"}, wantErr: "git.token_file: set with an http:// URL"},
		{name: "relative token file", given: &sluicev1.GitRegistry{Url: "https://git.example/net.git", TokenFile: "t"}, wantErr: `git.token_file: "t" is not an absolute path`},
		{name: "ca over http", given: &sluicev1.GitRegistry{Url: "http://git.example/net.git", CaFile: "/ca.pem"}, wantErr: "git.ca_file: set, but git.url is not https://"},
		{name: "token with a local repository", given: &sluicev1.GitRegistry{Dir: "/a", TokenFile: "/t"}, wantErr: "git.token_file and git.ca_file go with an https:// URL"},
		{name: "no host", given: &sluicev1.GitRegistry{Url: "https:///net.git"}, wantErr: "names no host"},
		{name: "remote host", given: &sluicev1.GitRegistry{Url: "file://git.example/net.git"}, wantErr: "names host git.example"},
		{name: "credentials", given: &sluicev1.GitRegistry{Url: "file://ada:secret@/net.git"}, wantErr: "carries credentials"},
		{name: "relative url", given: &sluicev1.GitRegistry{Url: "file:net.git"}, wantErr: `"file:net.git" reads as scp-like, host file and path net.git, as git reads it: for a URL write file://`},
		{name: "file url without a path", given: &sluicev1.GitRegistry{Url: "file://"}, wantErr: "names no absolute path"},
		{name: "relative dir", given: &sluicev1.GitRegistry{Dir: "net"}, wantErr: `git.dir: "net" is not an absolute path`},
		{name: "bad branch", given: &sluicev1.GitRegistry{Dir: "/a", Branch: "a..b"}, wantErr: `git.branch: "a..b" is not a branch name`},
		{name: "full ref", given: &sluicev1.GitRegistry{Dir: "/a", Branch: "refs/heads/main"}, wantErr: `git.branch: "refs/heads/main" is not a branch name`},
		{name: "absolute path", given: &sluicev1.GitRegistry{Dir: "/a", Path: "/intents"}, wantErr: `git.path: "/intents" is absolute`},
		{name: "path leaves", given: &sluicev1.GitRegistry{Dir: "/a", Path: "intents/../../x"}, wantErr: "leaves the repository"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.Check(&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Git{Git: tt.given}})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

// The repository stays open between fetches; one repacked meanwhile (a
// git gc: every object moves to a new pack, the old packs are deleted) is
// read as it is now.
func TestGit_RepackedRepository_IsReadAsItIsNow(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a", map[string]string{"a.yaml": tenantAYAML})
	g.Git(g.Bare, "repack", "-a", "-d", "--quiet")
	r := open(t, &sluicev1.GitRegistry{Dir: g.Bare})
	fetch(t, r)

	c2 := g.Commit("b", map[string]string{"b.yaml": tenantBYAML})
	g.Git(g.Bare, "repack", "-a", "-d", "--quiet")
	g.Git(g.Bare, "prune-packed")
	snap := fetch(t, r)
	if got, want := docIDs(snap), []string{"a.yaml=layer2network/tenant-a", "b.yaml=layer2network/tenant-b"}; snap.Commit.GetHash() != c2 || !slices.Equal(got, want) {
		t.Errorf("after a repack: commit %s, documents %q; want %s with %q", snap.Commit.GetHash(), got, c2, want)
	}
}

// A merge commit at the head is the commit in force, and the answer has
// the intents of both its parents.
func TestGit_MergeCommit_HasBothParentsIntents(t *testing.T) {
	g := gittest.New(t)
	g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	g.Git(g.Work, "checkout", "--quiet", "-b", "tenant-b")
	g.Commit("tenant b", map[string]string{"b.yaml": tenantBYAML}) // pushes main, unchanged
	g.Git(g.Work, "checkout", "--quiet", "main")
	main := g.Commit("table t100", map[string]string{"t100.json": t100JSON})
	r := open(t, &sluicev1.GitRegistry{Url: g.URL()})
	if got := fetch(t, r).Commit.GetHash(); got != main {
		t.Fatalf("commit = %s, want %s", got, main)
	}

	g.Git(g.Work, "merge", "--quiet", "--no-ff", "-m", "merge tenant-b", "tenant-b")
	g.Git(g.Work, "push", "--quiet", "origin", "main")
	merge := g.Git(g.Work, "rev-parse", "HEAD")
	if n := len(strings.Fields(g.Git(g.Work, "log", "-1", "--format=%P"))); n != 2 {
		t.Fatalf("the head has %d parents, want a merge commit", n)
	}
	snap := fetch(t, r)
	want := []string{"a.yaml=layer2network/tenant-a", "b.yaml=layer2network/tenant-b", "t100.json=routingtable/t100"}
	if got := docIDs(snap); snap.Commit.GetHash() != merge || snap.Commit.GetSubject() != "merge tenant-b" || !slices.Equal(got, want) {
		t.Errorf("after the merge: commit %s (%s), documents %q; want %s (merge tenant-b) with %q",
			snap.Commit.GetHash(), snap.Commit.GetSubject(), got, merge, want)
	}
}

// A git revert of an earlier commit gives back what that commit changed:
// the same content, so the same version as before it, at the revert.
func TestGit_Revert_ReturnsTheOldContent(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a and b", map[string]string{"a.yaml": tenantAYAML, "b.yaml": tenantBYAML})
	r := open(t, &sluicev1.GitRegistry{Url: g.URL()})
	before := fetch(t, r).Version
	bad := g.Commit("b: vlan 201", map[string]string{"b.yaml": strings.Replace(tenantBYAML, "200", "201", 1)})
	g.Commit("docs", map[string]string{"README.md": "how we keep intents\n"})
	if got := document(t, fetch(t, r), "b.yaml").Intents[0].GetLayer2Network().GetVlan(); got != 201 {
		t.Fatalf("b.yaml's vlan = %d, want 201", got)
	}

	g.Git(g.Work, "revert", "--no-edit", bad)
	g.Git(g.Work, "push", "--quiet", "origin", "main")
	revert := g.Git(g.Work, "rev-parse", "HEAD")
	snap := fetch(t, r)
	if got := document(t, snap, "b.yaml").Intents[0].GetLayer2Network().GetVlan(); got != 200 || snap.Commit.GetHash() != revert || snap.Version != before {
		t.Errorf("after the revert: vlan %d at %s, version %s; want 200 at %s, version %s (the content before %s)",
			got, snap.Commit.GetHash(), snap.Version, revert, before, bad[:12])
	}
	if !strings.HasPrefix(snap.Commit.GetSubject(), "Revert ") {
		t.Errorf("subject = %q, want the revert's", snap.Commit.GetSubject())
	}
}

// A commit that removes every intent file: with the directory left (a
// README in it), an empty answer at that commit, which the configurator
// holds as it holds any registry's; with the directory gone, held here,
// naming the path and both commits, until a commit restores it.
func TestGit_MassDeletion_IsNeverReadAsNoIntent(t *testing.T) {
	t.Run("directory left", func(t *testing.T) {
		g := gittest.New(t)
		g.Commit("a and b", map[string]string{"intents/a.yaml": tenantAYAML, "intents/b.yaml": tenantBYAML, "intents/README.md": "intents\n"})
		r := open(t, &sluicev1.GitRegistry{Url: g.URL(), Path: "intents"})
		fetch(t, r)
		c := g.Commit("remove every intent", map[string]string{"intents/a.yaml": "", "intents/b.yaml": ""})
		snap := fetch(t, r)
		if len(snap.Documents) != 0 || snap.Commit.GetHash() != c || snap.Version == "" {
			t.Errorf("answer = %q at %s, version %q; want no document at %s, with a version", origins(snap), snap.Commit.GetHash(), snap.Version, c)
		}
	})
	t.Run("directory removed", func(t *testing.T) {
		g := gittest.New(t)
		c1 := g.Commit("a and b", map[string]string{"intents/a.yaml": tenantAYAML, "intents/b.yaml": tenantBYAML})
		r := open(t, &sluicev1.GitRegistry{Url: g.URL(), Path: "intents"})
		fetch(t, r)
		g.Git(g.Work, "rm", "--quiet", "-r", "intents")
		c2 := g.Commit("remove the intents", nil)
		snap, err := r.Fetch(context.Background())
		if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "path intents is not a directory") ||
			!strings.Contains(err.Error(), c1[:12]) || !strings.Contains(err.Error(), c2[:12]) || !strings.Contains(err.Error(), "(remove the intents)") {
			t.Fatalf("err = %v, want ErrHeld naming the path, %s and %s", err, c2[:12], c1[:12])
		}
		if len(snap.Documents) != 0 || snap.Commit != nil {
			t.Errorf("a held answer came with a snapshot: %+v", snap)
		}
		// Still held at the next fetch: the commit in force did not move.
		if _, err := r.Fetch(context.Background()); !errors.Is(err, registry.ErrHeld) {
			t.Fatalf("second fetch: err = %v, want ErrHeld", err)
		}

		c3 := g.Commit("restore a", map[string]string{"intents/a.yaml": tenantAYAML})
		if snap := fetch(t, r); snap.Commit.GetHash() != c3 || !slices.Equal(docIDs(snap), []string{"a.yaml=layer2network/tenant-a"}) {
			t.Errorf("after restoring: commit %s, documents %q; want %s with a.yaml", snap.Commit.GetHash(), docIDs(snap), c3)
		}
	})
}
