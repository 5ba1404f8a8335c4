package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PGP is an OpenPGP key pair made by gpg in a GNUPGHOME of its own.
type PGP struct {
	Home        string // the GNUPGHOME holding the key
	Fingerprint string
	// Subkey is the fingerprint of the signing subkey git signs with
	// (PGPOptions.SigningSubkey); "" when the primary key signs.
	Subkey string
	// Public is the public key, ASCII-armored (gpg --export --armor): the
	// primary key with its subkeys.
	Public string
	// program is the gpg git signs with: gpg, or a script running gpg at
	// the key's faked time.
	program string
	faked   string
}

// PGPOptions shape the key PGPKey makes.
type PGPOptions struct {
	// Expired: the key is made and signs on 2020-01-01 and expires a day
	// later, so it has expired when a test verifies its signatures.
	Expired bool
	// SigningSubkey: the primary key may only certify, and signs through
	// an ed25519 signing subkey (gpg --quick-add-key FPR ed25519 sign),
	// which git is told to use (user.signingkey SUBKEY!), as keys kept
	// offline with subkeys on a laptop or a card are.
	SigningSubkey bool
}

// PGPKey makes an ed25519 OpenPGP signing key for uid ("Ada
// <ada@example.net>", no passphrase) with gpg in a new GNUPGHOME, whose
// gpg-agent is stopped when the test ends.
func PGPKey(t testing.TB, uid string, opts PGPOptions) *PGP {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Fatalf("this test needs gpg (apt-get install gnupg): %v", err)
	}
	// A short path: gpg-agent's socket lives in it, and a socket's path is
	// limited to about 100 bytes.
	home, err := os.MkdirTemp("", "gpg")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	k := &PGP{Home: home, program: "gpg"}
	t.Cleanup(func() {
		cmd := exec.Command("gpgconf", "--kill", "gpg-agent")
		cmd.Env = append(os.Environ(), "GNUPGHOME="+home)
		_ = cmd.Run()
		_ = os.RemoveAll(home)
	})
	expire := "never"
	if opts.Expired {
		k.faked = "20200101T000000"
		expire = "1d"
		k.program = filepath.Join(home, "gpg-at-2020.sh")
		script := "#!/bin/sh\nexec gpg --faked-system-time " + k.faked + "! \"$@\"\n"
		if err := os.WriteFile(k.program, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	usage := "sign"
	if opts.SigningSubkey {
		usage = "cert"
	}
	k.gpg(t, "--quick-generate-key", uid, "ed25519", usage, expire)
	fprs := k.fingerprints(t, uid)
	if len(fprs) == 0 {
		t.Fatalf("gpg made no key for %s", uid)
	}
	k.Fingerprint = fprs[0]
	if opts.SigningSubkey {
		k.gpg(t, "--quick-add-key", k.Fingerprint, "ed25519", "sign", expire)
		if fprs = k.fingerprints(t, k.Fingerprint); len(fprs) != 2 {
			t.Fatalf("gpg made no signing subkey for %s: fingerprints %v", uid, fprs)
		}
		k.Subkey = fprs[1]
	}
	k.Public = k.gpg(t, "--armor", "--export", k.Fingerprint)
	return k
}

// Revoke revokes the key with the certificate gpg made with it and
// returns the public key, revocation included, armored.
func (k *PGP) Revoke(t testing.TB) string {
	t.Helper()
	cert, err := os.ReadFile(filepath.Join(k.Home, "openpgp-revocs.d", k.Fingerprint+".rev"))
	if err != nil {
		t.Fatal(err)
	}
	// gpg writes the certificate with its BEGIN line quoted (":-----BEGIN")
	// so that it is not imported by accident.
	p := filepath.Join(k.Home, "revoke.asc")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(cert), ":-----BEGIN", "-----BEGIN")), 0o600); err != nil {
		t.Fatal(err)
	}
	k.gpg(t, "--import", p)
	return k.gpg(t, "--armor", "--export", k.Fingerprint)
}

// fingerprints are the fingerprints of the key named, the primary's
// first, then its subkeys'.
func (k *PGP) fingerprints(t testing.TB, name string) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(k.gpg(t, "--with-colons", "--list-keys", name)) {
		if f := strings.Split(line, ":"); f[0] == "fpr" {
			out = append(out, f[9])
		}
	}
	return out
}

// signingKey is what git's user.signingkey names: the signing subkey
// (forced with "!", or gpg would pick a subkey of its own choice), else
// the primary key.
func (k *PGP) signingKey() string {
	if k.Subkey != "" {
		return k.Subkey + "!"
	}
	return k.Fingerprint
}

// RevokeSubkey revokes the signing subkey (gpg --edit-key: key 1,
// revkey, reason 0 "no reason") and returns the public key, the subkey's
// revocation included, armored; the primary key stays valid.
func (k *PGP) RevokeSubkey(t testing.TB) string {
	t.Helper()
	if k.Subkey == "" {
		t.Fatal("RevokeSubkey: the key has no signing subkey (PGPOptions.SigningSubkey)")
	}
	cmd := exec.Command("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--command-fd", "0", "--edit-key", k.Fingerprint)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+k.Home)
	cmd.Stdin = strings.NewReader("key 1\nrevkey\ny\n0\n\ny\nsave\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpg --edit-key %s revkey: %v\n%s", k.Fingerprint, err, out)
	}
	for line := range strings.Lines(k.gpg(t, "--with-colons", "--list-keys", k.Fingerprint)) {
		if f := strings.Split(line, ":"); f[0] == "sub" && f[1] != "r" {
			t.Fatalf("gpg did not revoke the subkey of %s: %s", k.Fingerprint, line)
		}
	}
	return k.gpg(t, "--armor", "--export", k.Fingerprint)
}

// Secret is the private key, armored (gpg --export-secret-keys --armor).
func (k *PGP) Secret(t testing.TB) string {
	t.Helper()
	return k.gpg(t, "--armor", "--export-secret-keys", k.Fingerprint)
}

func (k *PGP) gpg(t testing.TB, args ...string) string {
	t.Helper()
	base := []string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}
	if k.faked != "" {
		base = append(base, "--faked-system-time", k.faked+"!")
	}
	cmd := exec.Command("gpg", append(base, args...)...)
	cmd.Env = append(os.Environ(), "GNUPGHOME="+k.Home)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpg %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
