// Signed commits on demand: with git.allowed_signers_file, the head commit
// of a git registry's branch must be signed by a key of the file, as git
// verify-commit checks it. The file holds OpenPGP public keys
// (git_openpgp.go) or is OpenSSH's allowed_signers file: then the head
// must carry an SSH signature (git's gpg.format=ssh: an SSHSIG in the
// commit's gpgsig header, namespace "git") that verifies over the commit
// without that header, as ssh-keygen -Y verify checks it. A head that is
// unsigned, signed in the other format, signed by another key or badly
// signed is held (ErrHeld), naming the commit and why: nothing is synced
// from it, the commit in force stays, and a good commit on top of it is
// synced. The file is read at each fetch: a key removed from it holds the
// next fetch of a commit it signed.

package registry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/sluicehq/sluice/pkg/sshsig"
)

// gitSignatureNamespace is the namespace git signs commits in.
const gitSignatureNamespace = "git"

// checkSigned returns nil when head is signed by an allowed key of the
// file (OpenPGP public keys or an SSH allowed_signers file, told apart by
// isOpenPGPFile), an ErrHeld naming head and why when it is not, and
// another error when the file cannot be read (unreachable: nothing is
// known).
func (r *gitRegistry) checkSigned(head *object.Commit) error {
	file := r.allowedSigners
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read git.allowed_signers_file: %w", err)
	}
	if err := CheckAllowedKeys(data); err != nil {
		return fmt.Errorf("git.allowed_signers_file %s: %w", file, err)
	}
	pgp := isOpenPGPFile(data)
	why := ""
	sig := head.PGPSignature
	if sig == "" {
		why = "it is not signed"
	} else {
		msg, err := signedContent(head)
		if err != nil {
			return err
		}
		isPGP := strings.HasPrefix(sig, pgpSignature)
		switch {
		case pgp && isPGP:
			keys, err := parseOpenPGPKeys(data)
			if err != nil {
				return fmt.Errorf("git.allowed_signers_file %s: %w", file, err)
			}
			why = verifyOpenPGP(sig, msg, keys)
		case pgp:
			why = "it is signed by SSH key " + sshSigner(sig, msg) + ", which is not an allowed signer: the file holds OpenPGP keys, no SSH key"
		case isPGP:
			why = "it is signed by OpenPGP key " + pgpIssuer(sig) + ", which is not an allowed signer: the file is an SSH allowed_signers file, with no OpenPGP key"
		default:
			why = verifySSH(sig, msg, data)
		}
		if why == "" {
			return nil
		}
	}
	how := "git commit -S with gpg.format=ssh"
	if pgp {
		how = "git commit -S with an OpenPGP key of the file"
	}
	return fmt.Errorf("%w: the head %s (%s) of branch %s is not synced: %s; commits must be signed by a key of %s. "+
		"Nothing is synced from it, the intents in force stay — push a commit on top signed by an allowed key (%s)",
		ErrHeld, short(head.Hash), subject(head.Message), r.branch, why, file, how)
}

// signedContent is what a commit's signature is made over: the commit
// without its gpgsig header.
func signedContent(head *object.Commit) ([]byte, error) {
	payload := &plumbing.MemoryObject{}
	if err := head.EncodeWithoutSignature(payload); err != nil {
		return nil, fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
	}
	rd, err := payload.Reader()
	if err != nil {
		return nil, fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
	}
	defer rd.Close()
	msg := make([]byte, payload.Size())
	if _, err := io.ReadFull(rd, msg); err != nil {
		return nil, fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
	}
	return msg, nil
}

// verifySSH checks an SSH signature against an allowed_signers file; it
// returns "" when it verifies, else why the commit is held.
func verifySSH(sig string, msg, file []byte) string {
	signers, err := sshsig.ParseAllowedSigners(file)
	if err != nil {
		return "the allowed_signers file does not parse (" + err.Error() + ")"
	}
	_, _, err = sshsig.Verify([]byte(sig), msg, gitSignatureNamespace, signers)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, sshsig.ErrUnknownKey):
		return fmt.Sprintf("it is signed by key %s, which is not an allowed signer (for namespace git)", strings.TrimPrefix(err.Error(), sshsig.ErrUnknownKey.Error()+": "))
	case errors.Is(err, sshsig.ErrBadSignature):
		return "its signature does not verify (" + err.Error() + "): the commit was changed after it was signed, or signed for something else"
	default:
		return "its signature cannot be read (" + err.Error() + ")"
	}
}

// sshSigner names the key of an SSH signature, checked against no key.
func sshSigner(sig string, msg []byte) string {
	_, pub, _ := sshsig.Verify([]byte(sig), msg, gitSignatureNamespace, nil)
	if pub == nil {
		return "(unreadable)"
	}
	return ssh.FingerprintSHA256(pub)
}

// parseAllowedSigners counts the keys of an allowed_signers file.
func parseAllowedSigners(data []byte) (int, error) {
	signers, err := sshsig.ParseAllowedSigners(data)
	return len(signers), err
}
