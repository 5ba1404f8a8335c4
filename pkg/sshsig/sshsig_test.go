package sshsig_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha512"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sluicehq/sluice/pkg/sshsig"
)

// sign signs message with a new ed25519 key by ssh-keygen -Y sign in
// namespace; it returns the armored signature and the public key line.
func sign(t *testing.T, message, namespace string) (sig []byte, pub string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	msg := filepath.Join(dir, "msg")
	if err := os.WriteFile(msg, []byte(message), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-Y", "sign", "-n", namespace, "-f", key, msg).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
	}
	sig, err := os.ReadFile(msg + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return sig, strings.TrimSpace(string(p))
}

// Verify agrees with ssh-keygen -Y sign: its signature verifies over the
// message by the allowed key, and not over another message, in another
// namespace, or by a key that is not allowed.
func TestVerify_SignaturesOfSSHKeygen(t *testing.T) {
	sig, pub := sign(t, "tree 1234\n\nhello\n", "git")
	_, otherPub := sign(t, "x", "git")
	allowed, err := sshsig.ParseAllowedSigners([]byte("# comment\n\nada@example.net,ops@example.net namespaces=\"git,file\" " + pub + "\n"))
	if err != nil || len(allowed) != 1 || len(allowed[0].Principals) != 2 {
		t.Fatalf("parse: %v, %+v", err, allowed)
	}
	other, err := sshsig.ParseAllowedSigners([]byte("eve@example.net " + otherPub + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		message   string
		namespace string
		allowed   []sshsig.Signer
		wantErr   error
	}{
		{name: "good", message: "tree 1234\n\nhello\n", namespace: "git", allowed: allowed},
		{name: "another message", message: "tree 1234\n\nhello!\n", namespace: "git", allowed: allowed, wantErr: sshsig.ErrBadSignature},
		{name: "another namespace", message: "tree 1234\n\nhello\n", namespace: "file", allowed: allowed, wantErr: sshsig.ErrBadSignature},
		{name: "key not allowed", message: "tree 1234\n\nhello\n", namespace: "git", allowed: other, wantErr: sshsig.ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, err := sshsig.Verify(sig, []byte(tt.message), tt.namespace, tt.allowed)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && s.Principals[0] != "ada@example.net") {
				t.Errorf("err = %v, signer %v; want %v", err, s.Principals, tt.wantErr)
			}
		})
	}
	if _, _, err := sshsig.Verify([]byte("garbage"), nil, "git", allowed); !errors.Is(err, sshsig.ErrMalformed) {
		t.Errorf("garbage: err = %v, want ErrMalformed", err)
	}
	for _, bad := range []string{"ada@example.net", "ada@example.net cert-authority " + pub, "ada@example.net valid-before=\"20300101\" " + pub} {
		if _, err := sshsig.ParseAllowedSigners([]byte(bad)); err == nil {
			t.Errorf("ParseAllowedSigners(%q) = nil error, want one", bad)
		}
	}
}

// An RSA signature over SHA-1 (format ssh-rsa) verifies mathematically,
// but ssh-keygen refuses it in signatures: so does Verify, by an allowed
// key too. The same key's rsa-sha2-512 signature verifies.
func TestVerify_RSAOverSHA1_IsRefused(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := sshsig.ParseAllowedSigners([]byte("dev@example.com " + string(ssh.MarshalAuthorizedKey(signer.PublicKey()))))
	if err != nil {
		t.Fatal(err)
	}
	message := []byte("tree 0000\n")
	armor := func(algo string) []byte {
		h := sha512.Sum512(message)
		magic := [6]byte{'S', 'S', 'H', 'S', 'I', 'G'}
		signed := ssh.Marshal(struct {
			Magic                       [6]byte
			Namespace, Reserved, HashAl string
			Hash                        []byte
		}{magic, "git", "", "sha512", h[:]})
		sig, err := signer.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, signed, algo)
		if err != nil {
			t.Fatal(err)
		}
		env := ssh.Marshal(struct {
			Magic                       [6]byte
			Version                     uint32
			PublicKey                   []byte
			Namespace, Reserved, HashAl string
			Signature                   []byte
		}{magic, 1, signer.PublicKey().Marshal(), "git", "", "sha512", ssh.Marshal(sig)})
		return pem.EncodeToMemory(&pem.Block{Type: "SSH SIGNATURE", Bytes: env})
	}
	if _, _, err := sshsig.Verify(armor(ssh.SigAlgoRSASHA2512), message, "git", allowed); err != nil {
		t.Fatalf("rsa-sha2-512 by an allowed key: %v, want it verified", err)
	}
	_, _, err = sshsig.Verify(armor(ssh.SigAlgoRSA), message, "git", allowed)
	if !errors.Is(err, sshsig.ErrBadSignature) || !strings.Contains(err.Error(), "SHA-1") {
		t.Fatalf("ssh-rsa (SHA-1) by an allowed key: %v, want ErrBadSignature naming SHA-1", err)
	}
}
