// OpenPGP signed commits: an allowed-keys file whose first line that is
// neither blank nor a # comment opens an ASCII-armored block ("-----BEGIN
// PGP PUBLIC KEY BLOCK-----", what gpg --export --armor writes) holds
// OpenPGP public keys — one block or several concatenated, each possibly a
// keyring — and a head commit must carry an OpenPGP signature (git
// commit -S with gpg.format=openpgp, the default) made by one of them,
// as git verify-commit checks it with gpg: over the commit without its
// gpgsig header, by a key that is neither expired nor revoked now. Any
// other file is an SSH allowed_signers file (git_signed.go). Checked in
// Go with github.com/ProtonMail/go-crypto/openpgp; no gpg is needed on
// the configurator's host.

package registry

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

const (
	pgpPublicBlock  = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
	pgpPrivateBlock = "-----BEGIN PGP PRIVATE KEY BLOCK-----"
	pgpSignature    = "-----BEGIN PGP SIGNATURE-----"
)

// isOpenPGPFile reports whether an allowed-keys file holds armored
// OpenPGP keys rather than allowed_signers lines: its first line that is
// neither blank nor a comment opens an armored PGP block.
func isOpenPGPFile(data []byte) bool {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return strings.HasPrefix(line, "-----BEGIN PGP ")
	}
	return false
}

// parseOpenPGPKeys reads the armored public keys of an allowed-keys file.
// Outside the blocks only blank lines and # comments are allowed (a file
// holds OpenPGP keys or allowed_signers lines, never both); a private key
// is refused, so that a secret never sits where public keys are read.
func parseOpenPGPKeys(data []byte) (openpgp.EntityList, error) {
	var keys openpgp.EntityList
	lines := strings.SplitAfter(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case line == pgpPrivateBlock:
			return nil, fmt.Errorf("line %d opens a private key block: the file must hold public keys only (gpg --export --armor KEY), never a secret", i+1)
		case line != pgpPublicBlock:
			return nil, fmt.Errorf("line %d is neither in an armored public key block nor a # comment: a file holds OpenPGP public keys (gpg --export --armor) or SSH allowed_signers lines, not both", i+1)
		}
		start, end := i, -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "-----END PGP PUBLIC KEY BLOCK-----" {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("the public key block of line %d has no END line", start+1)
		}
		block := strings.Join(lines[start:end+1], "")
		list, err := openpgp.ReadArmoredKeyRing(strings.NewReader(block))
		if err != nil {
			return nil, fmt.Errorf("the public key block of line %d does not parse: %w", start+1, err)
		}
		for _, e := range list {
			if e.PrivateKey != nil {
				return nil, fmt.Errorf("the key block of line %d holds a private key (%s): the file must hold public keys only (gpg --export --armor KEY), never a secret", start+1, pgpFingerprint(e.PrimaryKey.Fingerprint))
			}
		}
		keys = append(keys, list...)
		i = end
	}
	return keys, nil
}

// CheckAllowedKeys checks the content of a --require-signed file as a
// sync reads it: OpenPGP public keys or SSH allowed_signers lines, at
// least one key, and no private key.
func CheckAllowedKeys(data []byte) error {
	n := 0
	if isOpenPGPFile(data) {
		keys, err := parseOpenPGPKeys(data)
		if err != nil {
			return err
		}
		n = len(keys)
	} else {
		if bytes.Contains(data, []byte(pgpPrivateBlock)) || bytes.Contains(data, []byte("PRIVATE KEY-----")) {
			return errors.New("it holds a private key: the file must hold public keys only, never a secret")
		}
		if len(data) > 0 && data[0]&0x80 != 0 {
			return errors.New("it is not text: give OpenPGP keys ASCII-armored (gpg --export --armor KEY), or SSH allowed_signers lines")
		}
		signers, err := parseAllowedSigners(data)
		if err != nil {
			return err
		}
		n = signers
	}
	if n == 0 {
		return errors.New("it lists no key: no commit could be synced; add the keys that sign the branch")
	}
	return nil
}

// verifyOpenPGP checks the armored OpenPGP signature sig over msg against
// keys; it returns "" when it verifies, else why the commit is held.
func verifyOpenPGP(sig string, msg []byte, keys openpgp.EntityList) string {
	signer := pgpIssuer(sig)
	_, err := openpgp.CheckArmoredDetachedSignature(keys, bytes.NewReader(msg), strings.NewReader(sig), nil)
	var bad pgperrors.SignatureError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return fmt.Sprintf("it is signed by OpenPGP key %s, which is not an allowed signer", signer)
	case errors.Is(err, pgperrors.ErrKeyRevoked):
		return fmt.Sprintf("it is signed by OpenPGP key %s, which is revoked", signer)
	case errors.Is(err, pgperrors.ErrKeyExpired):
		return fmt.Sprintf("it is signed by OpenPGP key %s, which has expired", signer)
	case errors.Is(err, pgperrors.ErrSignatureExpired):
		return fmt.Sprintf("its signature by OpenPGP key %s has expired", signer)
	case errors.As(err, &bad):
		return "its signature does not verify (" + err.Error() + "): the commit was changed after it was signed, or signed for something else"
	default:
		return "its signature cannot be read (" + err.Error() + ")"
	}
}

// pgpIssuer names the key an armored signature says it was made by: its
// fingerprint when the signature carries it (gpg's do), else its key ID.
func pgpIssuer(sig string) string {
	block, err := armor.Decode(strings.NewReader(sig))
	if err != nil {
		return "(unreadable)"
	}
	p, err := packet.Read(block.Body)
	s, ok := p.(*packet.Signature)
	switch {
	case err != nil || !ok:
		return "(unreadable)"
	case len(s.IssuerFingerprint) > 0:
		return pgpFingerprint(s.IssuerFingerprint)
	case s.IssuerKeyId != nil:
		return fmt.Sprintf("%016X", *s.IssuerKeyId)
	}
	return "(no issuer)"
}

func pgpFingerprint(fp []byte) string { return fmt.Sprintf("%X", fp) }
