// Signed commits on demand: with git.allowed_signers_file, the head commit
// of a git registry's branch must carry an SSH signature (git's
// gpg.format=ssh: an SSHSIG in the commit's gpgsig header, namespace
// "git") that verifies over the commit without that header, by a key of
// the file (OpenSSH's allowed_signers format), as git verify-commit
// checks it with ssh-keygen -Y verify. A head that is unsigned, signed
// with OpenPGP, signed by another key or badly signed is held (ErrHeld),
// naming the commit and why: nothing is synced from it, the commit in
// force stays, and a good commit on top of it is synced. The file is read
// at each fetch: a key removed from it holds the next fetch of a commit it
// signed.

package registry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/sluicehq/sluice/pkg/sshsig"
)

// gitSignatureNamespace is the namespace git signs commits in.
const gitSignatureNamespace = "git"

// checkSigned returns nil when head is signed by an allowed signer of
// file, an ErrHeld naming head and why when it is not, and another error
// when the file cannot be read (unreachable: nothing is known).
func (r *gitRegistry) checkSigned(head *object.Commit) error {
	file := r.allowedSigners
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read git.allowed_signers_file: %w", err)
	}
	signers, err := sshsig.ParseAllowedSigners(data)
	if err != nil {
		return fmt.Errorf("git.allowed_signers_file %s: %w", file, err)
	}
	if len(signers) == 0 {
		return fmt.Errorf("git.allowed_signers_file %s lists no key: no commit could be synced; add the keys that sign the branch", file)
	}
	why := ""
	sig := head.PGPSignature
	switch {
	case sig == "":
		why = "it is not signed"
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		why = "it is signed with OpenPGP; only SSH signatures are checked"
	default:
		payload := &plumbing.MemoryObject{}
		if err := head.EncodeWithoutSignature(payload); err != nil {
			return fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
		}
		rd, err := payload.Reader()
		if err != nil {
			return fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
		}
		msg := make([]byte, payload.Size())
		_, err = io.ReadFull(rd, msg)
		_ = rd.Close()
		if err != nil {
			return fmt.Errorf("read the signed content of commit %s: %w", short(head.Hash), err)
		}
		_, _, err = sshsig.Verify([]byte(sig), msg, gitSignatureNamespace, signers)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, sshsig.ErrUnknownKey):
			why = fmt.Sprintf("it is signed by key %s, which is not an allowed signer (for namespace git)", strings.TrimPrefix(err.Error(), sshsig.ErrUnknownKey.Error()+": "))
		case errors.Is(err, sshsig.ErrBadSignature):
			why = "its signature does not verify (" + err.Error() + "): the commit was changed after it was signed, or signed for something else"
		default:
			why = "its signature cannot be read (" + err.Error() + ")"
		}
	}
	return fmt.Errorf("%w: the head %s (%s) of branch %s is not synced: %s; commits must be signed by a key of %s. "+
		"Nothing is synced from it, the intents in force stay — push a commit on top signed by an allowed key (git commit -S with gpg.format=ssh)",
		ErrHeld, short(head.Hash), subject(head.Message), r.branch, why, file)
}
