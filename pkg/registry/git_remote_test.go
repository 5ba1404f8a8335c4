package registry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// openRemote opens git registry name of src with its clone under cache.
func openRemote(t testing.TB, name, cache string, src *sluicev1.GitRegistry) registry.Registry {
	t.Helper()
	r, err := registry.Open(&sluicev1.RegistrySpec{Name: name, Source: &sluicev1.RegistrySpec_Git{Git: src}},
		registry.Options{GitCache: cache}, zerolog.Nop())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// A repository served over HTTP (git http-backend) is cloned into the
// cache at the first fetch and its branch fetched at each one after: a
// new commit shows at the next fetch; a registry opened anew on the same
// cache reads the clone it left.
func TestGitRemote_FetchesTheBranchIntoTheCache(t *testing.T) {
	g := gittest.New(t)
	c1 := g.Commit("tenants a and b", map[string]string{"intents/a.yaml": tenantAYAML, "intents/b.yaml": tenantBYAML, "other/x.yaml": t100JSON})
	srv := g.Serve(gittest.ServeOptions{})
	cache := t.TempDir()
	src := &sluicev1.GitRegistry{Url: srv.URL, Path: "intents"}
	r := openRemote(t, "gitops", cache, src)

	snap := fetch(t, r)
	if got, want := docIDs(snap), []string{"a.yaml=layer2network/tenant-a", "b.yaml=layer2network/tenant-b"}; !slices.Equal(got, want) {
		t.Errorf("documents = %q, want %q", got, want)
	}
	if snap.Commit.GetHash() != c1 || snap.Commit.GetSubject() != "tenants a and b" {
		t.Errorf("commit = %v, want %s", snap.Commit, c1)
	}
	clones, _ := filepath.Glob(filepath.Join(cache, "gitops-*.git", "HEAD"))
	if len(clones) != 1 {
		t.Fatalf("clones in the cache = %q, want one bare clone gitops-*.git", clones)
	}
	if r.Location() != srv.URL+" branch main path intents" {
		t.Errorf("location = %q", r.Location())
	}

	c2 := g.Commit("b: vlan 201", map[string]string{"intents/b.yaml": strings.Replace(tenantBYAML, "200", "201", 1)})
	snap = fetch(t, r)
	if snap.Commit.GetHash() != c2 || document(t, snap, "b.yaml").Intents[0].GetLayer2Network().GetVlan() != 201 {
		t.Errorf("after a new commit: commit %s, want %s with b.yaml's vlan 201", snap.Commit.GetHash(), c2)
	}

	// Opened anew on the same cache: the clone is reused, the branch read.
	if snap := fetch(t, openRemote(t, "gitops", cache, src)); snap.Commit.GetHash() != c2 {
		t.Errorf("a registry opened anew: commit %s, want %s", snap.Commit.GetHash(), c2)
	}
	if clones, _ := filepath.Glob(filepath.Join(cache, "*")); len(clones) != 1 {
		t.Errorf("cache holds %q, want the one clone", clones)
	}
}

// A server that is down, or a branch it does not have, is an error (the
// configurator's unreachable), never an empty answer; the server back, the
// branch is read again.
func TestGitRemote_ServerDown_IsAnError(t *testing.T) {
	g := gittest.New(t)
	g.Commit("a", map[string]string{"a.yaml": tenantAYAML})
	srv := g.Serve(gittest.ServeOptions{})
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: srv.URL})
	fetch(t, r)

	if _, err := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: srv.URL, Branch: "release"}).Fetch(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "branch release: not found on the server") {
		t.Errorf("a missing branch: err = %v, want it named as not found on the server", err)
	}

	srv.Stop()
	snap, err := r.Fetch(context.Background())
	if err == nil || errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "registry gitops: fetch branch main of "+srv.URL) {
		t.Fatalf("server stopped: err = %v, want a fetch error naming the registry and the URL", err)
	}
	if len(snap.Documents) != 0 || snap.Commit != nil {
		t.Errorf("an error came with a snapshot: %+v", snap)
	}
}

// A force-push that rewinds the branch on the server is held naming both
// commits, as in place: the clone still has the commit in force.
func TestGitRemote_ForcePush_IsHeld(t *testing.T) {
	g := gittest.New(t)
	c1 := g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	c2 := g.Commit("tenant b", map[string]string{"b.yaml": tenantBYAML})
	srv := g.Serve(gittest.ServeOptions{})
	r := openRemote(t, "gitops", t.TempDir(), &sluicev1.GitRegistry{Url: srv.URL})
	if got := fetch(t, r).Commit.GetHash(); got != c2 {
		t.Fatalf("commit = %s, want %s", got, c2)
	}
	g.ForcePush(c1)
	_, err := r.Fetch(context.Background())
	if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "was rewound") ||
		!strings.Contains(err.Error(), c1[:12]) || !strings.Contains(err.Error(), c2[:12]) {
		t.Fatalf("after a force-push to %s: err = %v, want ErrHeld naming %s and %s", c1[:12], err, c1[:12], c2[:12])
	}
	g.ForcePush(c2)
	if got := fetch(t, r).Commit.GetHash(); got != c2 {
		t.Errorf("the branch restored: commit %s, want %s", got, c2)
	}
}

// A server that requires a token: without one, or with a wrong one, the
// error names the registry and authentication, and never the token; with
// it, the branch is read. The token is read from its file at each fetch.
func TestGitRemote_Token_IsSentAndNeverShown(t *testing.T) {
	const token = "glpat-s3cr3t-T0KEN-4242"
	g := gittest.New(t)
	c1 := g.Commit("a", map[string]string{"a.yaml": tenantAYAML})
	srv := g.Serve(gittest.ServeOptions{TLS: true, Token: token})
	dir := t.TempDir()
	ca := srv.CAFile(t, dir)
	tokenFile := filepath.Join(dir, "token")
	writeToken := func(s string) {
		if err := os.WriteFile(tokenFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	userURL := strings.Replace(srv.URL, "https://", "https://deploy-"+token+"@", 1) // a user that is the token, as some put it

	var shown []string
	check := func(name, wantErr string, src *sluicev1.GitRegistry) {
		t.Helper()
		r := openRemote(t, "gitops", t.TempDir(), src)
		_, err := r.Fetch(context.Background())
		if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "registry gitops") {
			t.Errorf("%s: err = %v, want one naming registry gitops and %q", name, err, wantErr)
		}
		if err != nil {
			shown = append(shown, err.Error())
		}
		shown = append(shown, r.Location())
	}
	check("no token", "authentication required", &sluicev1.GitRegistry{Url: srv.URL, CaFile: ca})
	writeToken("not-the-token\n")
	check("wrong token", "authentication failed: the server refused the token read from "+tokenFile, &sluicev1.GitRegistry{Url: srv.URL, CaFile: ca, TokenFile: tokenFile})
	check("wrong token, user in the URL", "authentication failed", &sluicev1.GitRegistry{Url: userURL, CaFile: ca, TokenFile: tokenFile})
	check("no CA", "certificate", &sluicev1.GitRegistry{Url: srv.URL, TokenFile: tokenFile})

	// The right token, rotated into the file: read at the next fetch.
	r := openRemote(t, "gitops", t.TempDir(), &sluicev1.GitRegistry{Url: userURL, CaFile: ca, TokenFile: tokenFile})
	if _, err := r.Fetch(context.Background()); err == nil {
		t.Fatal("a wrong token was taken")
	}
	writeToken(token + "\n")
	if got := fetch(t, r).Commit.GetHash(); got != c1 {
		t.Errorf("with the token: commit %s, want %s", got, c1)
	}
	shown = append(shown, r.Location())
	srv.Stop()
	_, err := r.Fetch(context.Background())
	if err == nil {
		t.Fatal("a stopped server answered")
	}
	shown = append(shown, err.Error())

	for _, s := range shown {
		if strings.Contains(s, token) || strings.Contains(s, "deploy-") {
			t.Errorf("the token or the URL's user is shown: %q", s)
		}
	}
}

// A repository served over SSH: the key from its file authenticates, the
// server's host key is checked against the known_hosts file; a key the
// server does not take, or a host key that is not the one known, is an
// error naming the registry and why.
func TestGitRemote_SSH_KeyAndKnownHosts(t *testing.T) {
	g := gittest.New(t)
	c1 := g.Commit("a", map[string]string{"a.yaml": tenantAYAML})
	key, pub := gittest.SSHKey(t, "deploy@sluice")
	other, _ := gittest.SSHKey(t, "eve@example.net")
	srv := g.ServeSSH(pub)
	src := &sluicev1.GitRegistry{Url: srv.URL, SshKeyFile: key, KnownHostsFile: srv.KnownHosts}
	r := openRemote(t, "gitops", t.TempDir(), src)
	if got := fetch(t, r).Commit.GetHash(); got != c1 {
		t.Errorf("over ssh: commit %s, want %s", got, c1)
	}
	c2 := g.Commit("b", map[string]string{"b.yaml": tenantBYAML})
	if got := fetch(t, r).Commit.GetHash(); got != c2 {
		t.Errorf("over ssh, a new commit: commit %s, want %s", got, c2)
	}

	wrongHosts := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(wrongHosts, []byte(strings.Replace(readFile(t, srv.KnownHosts), "127.0.0.1", "127.0.0.2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		given   *sluicev1.GitRegistry
		wantErr string
	}{
		{"a key the server does not take", &sluicev1.GitRegistry{Url: srv.URL, SshKeyFile: other, KnownHostsFile: srv.KnownHosts}, "authentication failed: the server refused the key of " + other},
		{"an unknown host key", &sluicev1.GitRegistry{Url: srv.URL, SshKeyFile: key, KnownHostsFile: wrongHosts}, "the server's host key is not the one in " + wrongHosts},
	} {
		_, err := openRemote(t, "gitops", "", tt.given).Fetch(context.Background())
		if err == nil || !strings.Contains(err.Error(), "registry gitops") || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want one naming registry gitops and %q", tt.name, err, tt.wantErr)
		}
	}

	srv.Stop()
	if _, err := r.Fetch(context.Background()); err == nil || errors.Is(err, registry.ErrHeld) {
		t.Errorf("server stopped: err = %v, want a fetch error", err)
	}
}
