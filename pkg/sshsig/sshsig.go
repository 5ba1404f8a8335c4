// Package sshsig verifies SSH signatures (the SSHSIG format of OpenSSH's
// PROTOCOL.sshsig, made by `ssh-keygen -Y sign` and by git with
// gpg.format=ssh) against an allowed_signers file, as `ssh-keygen -Y
// verify` does for git. Entry points: ParseAllowedSigners, Verify.
package sshsig

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/pem"
	"fmt"
	"hash"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Signer is one line of an allowed_signers file.
type Signer struct {
	Principals []string
	Namespaces []string // nil: every namespace
	Key        ssh.PublicKey
	Line       int
}

// ParseAllowedSigners reads an allowed_signers file (ssh-keygen(1),
// "ALLOWED SIGNERS"): per line, principals, options, a public key. The
// options namespaces="…" is honoured; cert-authority, valid-after and
// valid-before are refused (not implemented: a line that would limit a key
// is never read as one that does not).
func ParseAllowedSigners(data []byte) ([]Signer, error) {
	var out []Signer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		principals, rest, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("line %d: want principals and a public key", n)
		}
		key, _, opts, _, err := ssh.ParseAuthorizedKey([]byte(strings.TrimSpace(rest)))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		s := Signer{Principals: strings.Split(principals, ","), Key: key, Line: n}
		for _, o := range opts {
			name, val, _ := strings.Cut(o, "=")
			switch strings.ToLower(name) {
			case "namespaces":
				s.Namespaces = strings.Split(strings.Trim(val, `"`), ",")
			default:
				return nil, fmt.Errorf("line %d: option %s is not supported", n, name)
			}
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Verify checks armored (an SSH SIGNATURE PEM block) over message in
// namespace and returns the allowed signer whose key made it.
func Verify(armored, message []byte, namespace string, allowed []Signer) (Signer, ssh.PublicKey, error) {
	block, _ := pem.Decode(armored)
	if block == nil || block.Type != "SSH SIGNATURE" {
		return Signer{}, nil, fmt.Errorf("%w: no SSH SIGNATURE block", ErrMalformed)
	}
	var env struct {
		Magic     [6]byte
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		HashAlg   string
		Signature []byte
	}
	if err := ssh.Unmarshal(block.Bytes, &env); err != nil || string(env.Magic[:]) != "SSHSIG" || env.Version != 1 {
		return Signer{}, nil, fmt.Errorf("%w: bad envelope", ErrMalformed)
	}
	pub, err := ssh.ParsePublicKey(env.PublicKey)
	if err != nil {
		return Signer{}, nil, fmt.Errorf("%w: public key: %w", ErrMalformed, err)
	}
	if env.Namespace != namespace {
		return Signer{}, pub, fmt.Errorf("%w: made for namespace %q, not %q", ErrBadSignature, env.Namespace, namespace)
	}
	var h hash.Hash
	switch env.HashAlg {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return Signer{}, pub, fmt.Errorf("%w: hash algorithm %q", ErrMalformed, env.HashAlg)
	}
	h.Write(message)
	var sig ssh.Signature
	if err := ssh.Unmarshal(env.Signature, &sig); err != nil {
		return Signer{}, pub, fmt.Errorf("%w: signature: %w", ErrMalformed, err)
	}
	signed := ssh.Marshal(struct {
		Magic     [6]byte
		Namespace string
		Reserved  string
		HashAlg   string
		Hash      []byte
	}{env.Magic, env.Namespace, env.Reserved, env.HashAlg, h.Sum(nil)})
	if sig.Format == ssh.SigAlgoRSA {
		// SHA-1: ssh-keygen refuses it in signatures (PROTOCOL.sshsig).
		return Signer{}, pub, fmt.Errorf("%w: an RSA signature over SHA-1 (ssh-rsa) is not accepted; sign with rsa-sha2-512 or another key type", ErrBadSignature)
	}
	if err := pub.Verify(signed, &sig); err != nil {
		return Signer{}, pub, fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	for _, s := range allowed {
		if bytes.Equal(s.Key.Marshal(), pub.Marshal()) && (s.Namespaces == nil || slices.Contains(s.Namespaces, namespace)) {
			return s, pub, nil
		}
	}
	return Signer{}, pub, fmt.Errorf("%w: %s", ErrUnknownKey, ssh.FingerprintSHA256(pub))
}
