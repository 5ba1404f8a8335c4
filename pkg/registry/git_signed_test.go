package registry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// With an allowed_signers file, only a head commit signed (git commit -S,
// gpg.format=ssh) by a key in it is synced; an unsigned one, one signed by
// another key, or one whose signature does not verify is held naming the
// commit and why, and a good commit on top is synced again.
func TestGit_RequireSigned_HoldsWhatIsNotSignedByAnAllowedKey(t *testing.T) {
	g := gittest.New(t)
	ada, adaPub := gittest.SSHKey(t, "ada@example.net")
	eve, _ := gittest.SSHKey(t, "eve@example.net")
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	writeSigners := func(s string) {
		if err := os.WriteFile(signers, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSigners("# who may deploy\nada@example.net namespaces=\"git\" " + adaPub + "\n")

	g.SignWith(ada)
	c1 := g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	srv := g.Serve(gittest.ServeOptions{})
	for _, src := range []*sluicev1.GitRegistry{{Url: g.URL()}, {Url: srv.URL}} {
		if got := fetch(t, openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: src.GetUrl(), AllowedSignersFile: signers})).Commit.GetHash(); got != c1 {
			t.Errorf("%s: a commit signed by an allowed key: commit %s, want %s", src.GetUrl(), got, c1)
		}
	}
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: g.URL(), AllowedSignersFile: signers})
	fetch(t, r)

	held := func(what, commit, why string) {
		t.Helper()
		snap, err := r.Fetch(context.Background())
		if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "the head "+commit[:12]) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: err = %v, want ErrHeld naming %s and %q", what, err, commit[:12], why)
		}
		if snap.Commit != nil || len(snap.Documents) != 0 {
			t.Errorf("%s: a held answer came with a snapshot: %+v", what, snap)
		}
	}

	g.SignWith("")
	c2 := g.Commit("tenant b, unsigned", map[string]string{"b.yaml": tenantBYAML})
	held("an unsigned commit", c2, "it is not signed")

	g.SignWith(eve)
	c3 := g.Commit("tenant b, by eve", map[string]string{"b.yaml": tenantBYAML})
	held("a commit signed by another key", c3, "it is signed by key SHA256:")

	g.SignWith(ada)
	c4 := g.Commit("tenant b, by ada", map[string]string{"b.yaml": tenantBYAML})
	if snap := fetch(t, r); snap.Commit.GetHash() != c4 || len(snap.Documents) != 2 {
		t.Errorf("a signed commit on top: commit %s, documents %q; want %s with a.yaml and b.yaml", snap.Commit.GetHash(), origins(snap), c4)
	}

	// Ada's key removed from the file: her commit is held at the next fetch.
	writeSigners("eve@example.net " + strings.TrimSpace(readFile(t, eve+".pub")) + "\n")
	held("a key removed from the file", c4, "which is not an allowed signer (for namespace git); commits must be signed by a key of "+signers)
	// A namespace that is not git's.
	writeSigners("ada@example.net namespaces=\"file\" " + adaPub + "\n")
	held("a key allowed for another namespace", c4, "is not an allowed signer")
	writeSigners("ada@example.net " + adaPub + "\n")
	fetch(t, r)

	// Ada's signature kept on a commit whose message was changed.
	c5 := g.Commit("tenant a: vlan 101", map[string]string{"a.yaml": strings.Replace(tenantAYAML, "100", "101", 1)})
	tampered := g.Tamper(c5, "tenant a: vlan 101 (reviewed)")
	held("a commit changed after it was signed", tampered, "its signature does not verify")
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
