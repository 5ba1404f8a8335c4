// Package gittest makes Git repositories for tests with the git binary
// (Debian's git): a bare repository, as a server's would be, and a clone
// the test commits in and pushes from. Entry point: New.
package gittest

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Repo is a bare repository (Bare, what a registry follows) and a clone
// of it (Work) that Commit commits in and pushes from, on branch main.
type Repo struct {
	t    testing.TB
	Bare string
	Work string
	// signKey: the private key file Commit signs with (gpg.format=ssh); "" = unsigned.
	signKey string
	// pgp: the OpenPGP key Commit signs with instead, when not nil.
	pgp *PGP
}

// SignWith makes the commits after it signed with the SSH private key in
// keyFile, as git commit -S with gpg.format=ssh signs; "" makes them
// unsigned again.
func (g *Repo) SignWith(keyFile string) { g.signKey, g.pgp = keyFile, nil }

// SignWithPGP makes the commits after it signed with OpenPGP key k by gpg,
// as git commit -S (gpg.format=openpgp) signs; SignWith("") makes them
// unsigned again.
func (g *Repo) SignWithPGP(k *PGP) { g.signKey, g.pgp = "", k }

// Author is the author and committer of every commit a Repo makes.
const Author = "Ada Admin <ada@example.net>"

// New makes an empty bare repository whose default branch is main, and a
// clone of it, under t.TempDir(). It fails the test when git is missing.
func New(t testing.TB) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("this test needs the git binary (apt-get install git): %v", err)
	}
	root := t.TempDir()
	g := &Repo{t: t, Bare: filepath.Join(root, "intents.git"), Work: filepath.Join(root, "work")}
	g.Git(root, "init", "--quiet", "--bare", "--initial-branch=main", g.Bare)
	g.Git(root, "init", "--quiet", "--initial-branch=main", g.Work)
	g.Git(g.Work, "remote", "add", "origin", g.Bare)
	return g
}

// URL is the bare repository's file:// URL.
func (g *Repo) URL() string { return "file://" + g.Bare }

// Git runs git in dir with a configuration of its own (none of the user's
// or the system's), failing the test on an error; it returns the output,
// trimmed.
func (g *Repo) Git(dir string, args ...string) string {
	g.t.Helper()
	return g.gitEnv(dir, nil, args...)
}

func (g *Repo) gitEnv(dir string, env []string, args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	name, email, _ := strings.Cut(strings.TrimSuffix(Author, ">"), " <")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME="+name, "GIT_AUTHOR_EMAIL="+email, "GIT_COMMITTER_NAME="+name, "GIT_COMMITTER_EMAIL="+email)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit writes files (path in the repository → content; "" removes the
// file) in the clone, commits them with message, pushes main and returns
// the commit's hash.
func (g *Repo) Commit(message string, files map[string]string) string {
	g.t.Helper()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if files[name] == "" {
			g.Git(g.Work, "rm", "--quiet", name)
			continue
		}
		p := filepath.Join(g.Work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			g.t.Fatal(err)
		}
		g.Git(g.Work, "add", name)
	}
	switch {
	case g.pgp != nil:
		g.gitEnv(g.Work, []string{"GNUPGHOME=" + g.pgp.Home}, "-c", "gpg.format=openpgp", "-c", "gpg.program="+g.pgp.program,
			"-c", "user.signingkey="+g.pgp.signingKey(), "commit", "--quiet", "--allow-empty", "-S", "-m", message)
	case g.signKey != "":
		g.Git(g.Work, "-c", "gpg.format=ssh", "-c", "user.signingkey="+g.signKey, "commit", "--quiet", "--allow-empty", "-S", "-m", message)
	default:
		g.Git(g.Work, "commit", "--quiet", "--allow-empty", "-m", message)
	}
	g.Git(g.Work, "push", "--quiet", "origin", "main")
	return g.Git(g.Work, "rev-parse", "HEAD")
}

// ForcePush makes branch main of the bare repository commit rev.
func (g *Repo) ForcePush(rev string) {
	g.t.Helper()
	g.Git(g.Work, "push", "--quiet", "--force", "origin", rev+":refs/heads/main")
}

// Import feeds stream to git fast-import in the bare repository: a quick
// way to make a large history.
func (g *Repo) Import(stream string) {
	g.t.Helper()
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = g.Bare
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Stdin = strings.NewReader(stream)
	if out, err := cmd.CombinedOutput(); err != nil {
		g.t.Fatalf("git fast-import: %v\n%s", err, out)
	}
}

// SSHKey makes an ed25519 key pair with ssh-keygen (no passphrase) in a
// new directory and returns the private key's file and the public key's
// line ("ssh-ed25519 AAAA… comment").
func SSHKey(t testing.TB, comment string) (keyFile, public string) {
	t.Helper()
	keyFile = filepath.Join(t.TempDir(), "id_ed25519")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", keyFile).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen (apt-get install openssh-client): %v\n%s", err, out)
	}
	pub, err := os.ReadFile(keyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return keyFile, strings.TrimSpace(string(pub))
}

// Tamper writes a copy of commit rev with its message replaced, keeping its
// signature (which then no longer verifies), and moves branch main of the
// bare repository to it; it returns the copy's hash.
func (g *Repo) Tamper(rev, message string) string {
	g.t.Helper()
	raw := g.Git(g.Bare, "cat-file", "commit", rev)
	head, _, ok := strings.Cut(raw, "\n\n")
	if !ok {
		g.t.Fatalf("commit %s has no message", rev)
	}
	cmd := exec.Command("git", "hash-object", "-t", "commit", "-w", "--stdin")
	cmd.Dir = g.Bare
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Stdin = strings.NewReader(head + "\n\n" + message + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git hash-object: %v\n%s", err, out)
	}
	h := strings.TrimSpace(string(out))
	g.Git(g.Bare, "update-ref", "refs/heads/main", h)
	return h
}
