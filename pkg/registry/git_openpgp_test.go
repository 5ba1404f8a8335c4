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

// With a file of OpenPGP public keys, only a head commit signed (git
// commit -S with gpg) by a key in it is synced; an unsigned one, one
// signed by another key, by an expired or revoked key, one signed with
// SSH, or one whose signature does not verify is held naming the commit
// and why, and a good commit on top is synced again.
func TestGit_RequireSignedOpenPGP_HoldsWhatIsNotSignedByAnAllowedKey(t *testing.T) {
	g := gittest.New(t)
	ada := gittest.PGPKey(t, "Ada Admin <ada@example.net>", gittest.PGPOptions{})
	eve := gittest.PGPKey(t, "Eve <eve@example.net>", gittest.PGPOptions{})
	old := gittest.PGPKey(t, "Old <old@example.net>", gittest.PGPOptions{Expired: true})
	sshKey, _ := gittest.SSHKey(t, "ada@example.net")
	keys := filepath.Join(t.TempDir(), "allowed.asc")
	writeKeys := func(s string) {
		t.Helper()
		if err := os.WriteFile(keys, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Two keys, concatenated armored blocks with a comment.
	writeKeys("# who may deploy\n" + ada.Public + "\n\n" + old.Public + "\n")

	g.SignWithPGP(ada)
	c1 := g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	srv := g.Serve(gittest.ServeOptions{})
	for _, src := range []string{g.URL(), srv.URL} {
		if got := fetch(t, openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: src, AllowedSignersFile: keys})).Commit.GetHash(); got != c1 {
			t.Errorf("%s: a commit signed by an allowed key: commit %s, want %s", src, got, c1)
		}
	}
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: g.URL(), AllowedSignersFile: keys})
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

	g.SignWithPGP(eve)
	c3 := g.Commit("tenant b, by eve", map[string]string{"b.yaml": tenantBYAML})
	held("a commit signed by another key", c3, "it is signed by OpenPGP key "+eve.Fingerprint+", which is not an allowed signer")

	g.SignWithPGP(old)
	c4 := g.Commit("tenant b, by an expired key", map[string]string{"b.yaml": tenantBYAML})
	held("a commit signed by an expired key", c4, "it is signed by OpenPGP key "+old.Fingerprint+", which has expired")

	g.SignWith(sshKey)
	c5 := g.Commit("tenant b, signed with ssh", map[string]string{"b.yaml": tenantBYAML})
	held("an SSH-signed commit", c5, "it is signed by SSH key SHA256:")
	held("an SSH-signed commit", c5, "the file holds OpenPGP keys, no SSH key")

	g.SignWithPGP(ada)
	c6 := g.Commit("tenant b, by ada", map[string]string{"b.yaml": tenantBYAML})
	if snap := fetch(t, r); snap.Commit.GetHash() != c6 || len(snap.Documents) != 2 {
		t.Errorf("a signed commit on top: commit %s, documents %q; want %s with a.yaml and b.yaml", snap.Commit.GetHash(), origins(snap), c6)
	}

	// Ada's key removed from the file: her commit is held at the next fetch.
	writeKeys(eve.Public + "\n")
	held("a key removed from the file", c6, "which is not an allowed signer; commits must be signed by a key of "+keys)
	// Ada's key revoked, the revocation in the file.
	writeKeys(ada.Revoke(t) + "\n")
	held("a revoked key", c6, "it is signed by OpenPGP key "+ada.Fingerprint+", which is revoked")

	// Bob's signature kept on a commit whose message was changed.
	bob := gittest.PGPKey(t, "Bob <bob@example.net>", gittest.PGPOptions{})
	writeKeys(bob.Public + "\n")
	g.SignWithPGP(bob)
	c7 := g.Commit("tenant a: vlan 101", map[string]string{"a.yaml": strings.Replace(tenantAYAML, "100", "101", 1)})
	tampered := g.Tamper(c7, "tenant a: vlan 101 (reviewed)")
	held("a commit changed after it was signed", tampered, "its signature does not verify")
}

// An OpenPGP-signed commit checked against an SSH allowed_signers file is
// held as signed by a key not in the file, naming the format.
func TestGit_RequireSigned_OpenPGPCommitWithAllowedSignersFile_Held(t *testing.T) {
	g := gittest.New(t)
	_, adaPub := gittest.SSHKey(t, "ada@example.net")
	ada := gittest.PGPKey(t, "Ada Admin <ada@example.net>", gittest.PGPOptions{})
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(signers, []byte("ada@example.net "+adaPub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.SignWithPGP(ada)
	c1 := g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: g.URL(), AllowedSignersFile: signers})
	_, err := r.Fetch(context.Background())
	want := "it is signed by OpenPGP key " + ada.Fingerprint + ", which is not an allowed signer: the file is an SSH allowed_signers file"
	if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "the head "+c1[:12]) || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want ErrHeld naming %s and %q", err, c1[:12], want)
	}
}

// A file of keys that holds a private key, no key, or does not parse is
// refused, naming what is wrong; at a sync it makes the registry
// unreachable (not held: nothing is known).
func TestCheckAllowedKeys(t *testing.T) {
	ada := gittest.PGPKey(t, "Ada Admin <ada@example.net>", gittest.PGPOptions{})
	_, sshPub := gittest.SSHKey(t, "ada@example.net")
	pub := ada.Public
	for _, tc := range []struct{ name, given, wantErr string }{
		{"openpgp public key", pub, ""},
		{"two blocks", pub + "\n" + pub + "\n", ""},
		{"ssh allowed_signers", "ada@example.net " + sshPub + "\n", ""},
		{"openpgp private key", ada.Secret(t), "private key"},
		{"private key after a public one", pub + "\n" + ada.Secret(t), "line"},
		{"empty", "# nobody\n", "lists no key"},
		{"truncated block", pub[:len(pub)/2], "has no END line"},
		{"corrupt block", strings.Replace(pub, "\n\n", "\n\n!!", 1), "does not parse"},
		{"ssh line after a block", pub + "\nada@example.net " + sshPub + "\n", "not both"},
		{"ssh private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", "private key"},
		{"binary keyring", "\x99\x01\x0d", "not text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := registry.CheckAllowedKeys([]byte(tc.given))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("err = %v, want one saying %q", err, tc.wantErr)
			}
		})
	}

	g := gittest.New(t)
	g.SignWithPGP(ada)
	g.Commit("tenant a", map[string]string{"a.yaml": tenantAYAML})
	keys := filepath.Join(t.TempDir(), "allowed.asc")
	if err := os.WriteFile(keys, []byte(ada.Secret(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: g.URL(), AllowedSignersFile: keys})
	if _, err := r.Fetch(context.Background()); err == nil || errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "git.allowed_signers_file "+keys+": ") {
		t.Errorf("a private key in the file: err = %v, want an error (not held) naming git.allowed_signers_file", err)
	}
}

// A key whose primary only certifies and signs through a subkey (git
// commit -S with user.signingkey SUBKEY!): a commit the subkey signed is
// synced when the primary key's export is in the file, since that export
// carries the subkey and its binding; once the subkey is revoked (the
// revocation in the file, the primary key still valid), the same head is
// held, naming the subkey and why.
func TestGit_RequireSignedOpenPGP_SigningSubkey(t *testing.T) {
	g := gittest.New(t)
	ada := gittest.PGPKey(t, "Ada Admin <ada@example.net>", gittest.PGPOptions{SigningSubkey: true})
	keys := filepath.Join(t.TempDir(), "allowed.asc")
	writeKeys := func(s string) {
		t.Helper()
		if err := os.WriteFile(keys, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(ada.Public + "\n")
	g.SignWithPGP(ada)
	c1 := g.Commit("tenant a, by ada's subkey", map[string]string{"a.yaml": tenantAYAML})
	// The primary key only certifies (gpg would not sign with it): the
	// subkey signed, as the revoked case's reason shows.
	r := openRemote(t, "gitops", "", &sluicev1.GitRegistry{Url: g.URL(), AllowedSignersFile: keys})
	if got := fetch(t, r).Commit.GetHash(); got != c1 {
		t.Fatalf("a commit signed by a subkey of an allowed key: commit %s, want %s", got, c1)
	}

	writeKeys(ada.RevokeSubkey(t) + "\n")
	snap, err := r.Fetch(context.Background())
	want := "it is signed by OpenPGP key " + ada.Subkey + ", which is revoked"
	if !errors.Is(err, registry.ErrHeld) || !strings.Contains(err.Error(), "the head "+c1[:12]) || !strings.Contains(err.Error(), want) {
		t.Errorf("a revoked subkey: err = %v, want ErrHeld naming %s and %q", err, c1[:12], want)
	}
	if snap.Commit != nil || len(snap.Documents) != 0 {
		t.Errorf("a held answer came with a snapshot: %+v", snap)
	}
}
