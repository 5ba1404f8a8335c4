// Git registry: intents read from one directory of a Git repository at the
// head commit of a branch.
//
// The repository is on the configurator's host, named by a file:// URL or
// a directory (its working tree, or its git directory, bare or not); it is
// read in place with go-git, in this process: no git binary, no copy. (One
// on a server, an https:// URL, is fetched into a clone and read there the
// same way: git_remote.go.) At
// each Fetch the branch's head commit is resolved and the files directly
// in the directory Path of that commit's tree are read as sluice apply -f
// DIR reads a directory: the *.yaml, *.yml and *.json files (extension in
// any case), in name order, each parsed by intent.Parse, at most
// intent.MaxFileSize each. The working tree is never read: what is in
// force is what was committed. Each file is a Document whose Origin is its
// name.
//
// An answer is whole or an error. A repository that cannot be opened, a
// branch that does not exist, a Path that does not exist at the head
// commit: each is an error (the configurator's "unreachable"), never an
// empty answer. A Path that existed at the commit in force and is gone at
// a head descending from it (a commit removed every intent file) is
// ErrHeld, never an empty answer either. The registry remembers the commit of its last answer (the
// commit in force); a head that does not descend from it, because the
// branch was rewound to an older commit or rewritten, is ErrHeld naming
// both commits, until the branch descends from it again or the registry is
// opened anew (sluice registry add --update). The configurator gives a
// registry opened anew the commit in force it stored (git_inforce.go), so
// a rewind while it was down is held the same.
//
// A branch is read every sync interval (Changed never receives): a commit
// shows at the next one. An answer whose Path tree is the one already
// read costs the resolution of the branch and a commit, not a re-parse.

package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// DefaultGitBranch is the branch a git registry follows when none is given.
const DefaultGitBranch = "main"

// gitRegistry reads intents from a directory of a repository's branch.
type gitRegistry struct {
	*changeWatch
	repo     string  // the repository's directory; a remote's URL without credentials
	location string  // as given: the file:// URL or the directory; a remote's URL without credentials
	remote   *remote // nil: a repository on this host, read in place
	// allowedSigners: the allowed_signers file a head commit must be
	// signed by a key of (git_signed.go); "" = none required.
	allowedSigners string
	branch         string
	dir            string // Path inside the repository; "" = its root

	mu      sync.Mutex
	opened  *git.Repository // kept between fetches; nil until opened, or after a failed read
	inForce plumbing.Hash   // the commit of the last answer; zero before the first
	tree    plumbing.Hash   // the tree of dir at inForce
	snap    Snapshot        // the answer read at inForce
	// unknown: why the commit in force is not known (its stored record
	// did not decode); every head is held. "" = known (git_inforce.go).
	unknown string
}

// checkGit checks a git registry spec. Whether the repository exists is
// not checked: it is read on the configurator's host, at each Fetch.
func checkGit(spec *sluicev1.GitRegistry) error {
	u, d := spec.GetUrl(), spec.GetDir()
	switch {
	case u != "" && d != "":
		return errors.New("git: give git.url or git.dir, not both")
	case u == "" && d == "":
		return errors.New("git.url: required (a file:// URL such as file:///srv/git/intents.git), or git.dir")
	case isRemoteURL(u):
		if err := checkRemote(spec); err != nil {
			return err
		}
	case IsLocalGitPath(u):
		return fmt.Errorf("git.url: %q is a path, not a URL: give file://%s, or the directory as git.dir (sluice registry add --git makes a path a file:// URL)", u, u)
	case u != "":
		if _, err := gitURLPath(u); err != nil {
			return err
		}
		if spec.GetTokenFile() != "" || spec.GetCaFile() != "" || spec.GetSshKeyFile() != "" || spec.GetKnownHostsFile() != "" {
			return errors.New("git.token_file and git.ca_file go with an https:// URL, git.ssh_key_file and git.known_hosts_file with ssh://, not a repository on the configurator's host")
		}
	case spec.GetTokenFile() != "" || spec.GetCaFile() != "" || spec.GetSshKeyFile() != "" || spec.GetKnownHostsFile() != "":
		return errors.New("git.token_file and git.ca_file go with an https:// URL, git.ssh_key_file and git.known_hosts_file with ssh://, not git.dir")
	case !filepath.IsAbs(d):
		return fmt.Errorf("git.dir: %q is not an absolute path", d)
	}
	if b := spec.GetBranch(); b != "" {
		if err := plumbing.NewBranchReferenceName(b).Validate(); err != nil || strings.HasPrefix(b, "refs/") || strings.HasPrefix(b, "-") {
			return fmt.Errorf("git.branch: %q is not a branch name (give it without refs/heads/, such as main)", b)
		}
	}
	if _, err := gitPath(spec.GetPath()); err != nil {
		return err
	}
	if f := spec.GetAllowedSignersFile(); f != "" && !filepath.IsAbs(f) {
		return fmt.Errorf("git.allowed_signers_file: %q is not an absolute path", f)
	}
	return nil
}

// gitURLPath is the repository directory of a file:// URL.
func gitURLPath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("git.url: %q does not parse as a URL", stripUserinfo(raw))
	}
	switch {
	case u.Scheme != "file":
		return "", fmt.Errorf("git.url: %q: give an https://, http:// or ssh:// URL of a server, or a file:// URL of a repository on the configurator's host", stripUserinfo(raw))
	case u.User != nil:
		return "", fmt.Errorf("git.url: %q carries credentials: a file:// URL needs none", raw)
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("git.url: %q names host %s: a file:// URL names a repository on the configurator's host (file:///path)", raw, u.Host)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("git.url: %q has a query or fragment: give file:///path", raw)
	case !filepath.IsAbs(u.Path):
		return "", fmt.Errorf("git.url: %q names no absolute path: give file:///path", raw)
	}
	return filepath.Clean(u.Path), nil
}

// gitPath is Path cleaned: relative, slash-separated, "" for the root.
func gitPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("git.path: %q is absolute: give the directory's path inside the repository, such as intents", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("git.path: %q leaves the repository", p)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// openGit returns the registry name reads from spec. A missing repository
// is an error of Fetch, not of openGit.
func openGit(name string, spec *sluicev1.GitRegistry, opts Options, log zerolog.Logger) (Registry, error) {
	if err := checkGit(spec); err != nil {
		return nil, err
	}
	r := &gitRegistry{branch: cmp.Or(spec.GetBranch(), DefaultGitBranch)}
	r.dir, _ = gitPath(spec.GetPath())
	r.allowedSigners = spec.GetAllowedSignersFile()
	if u := spec.GetUrl(); isRemoteURL(u) {
		r.remote = newRemote(name, spec, r.branch, opts.GitCache)
		r.repo, r.location = r.remote.shown, r.remote.shown
	} else if u != "" {
		r.repo, _ = gitURLPath(u)
		r.location = u
	} else {
		r.repo = filepath.Clean(spec.GetDir())
		r.location = r.repo
	}
	r.changeWatch = newChangeWatch(log.With().Str("location", r.Location()).Logger(), func(context.Context) {})
	return r, nil
}

func (r *gitRegistry) Kind() string { return "git" }

// Location is the repository, the branch and the directory.
func (r *gitRegistry) Location() string {
	return GitLocation(r.location, r.branch, r.dir)
}

// GitLocation says where a git registry reads: "URL branch B path P",
// without the URL's user information.
func GitLocation(repo, branch, dir string) string {
	s := stripUserinfo(repo) + " branch " + cmp.Or(branch, DefaultGitBranch)
	if d, err := gitPath(dir); err == nil && d != "" {
		s += " path " + d
	}
	return s
}

// Close is safe to call twice.
func (r *gitRegistry) Close() error {
	r.stop()
	return nil
}

// Fetch reads the intent files at the branch's head commit. It runs in the
// caller's goroutine: go-git reads local files, and ctx is checked between
// files.
//
// The repository stays open between fetches: its objects never change
// (an object is named by the hash of its content), only where they are
// stored (a gc or a push packs them anew), and the branch is read from
// disk at every fetch. A read that fails on the open repository is tried
// once more on the repository opened anew (a held answer too: the commit
// in force may only have moved to a new pack), so a repacked or re-created
// repository is read as it is now.
func (r *gitRegistry) Fetch(ctx context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.remote != nil {
		return r.fetchRemote(ctx)
	}
	ref := plumbing.NewBranchReferenceName(r.branch)
	if r.opened != nil {
		if snap, err := r.fetch(ctx, r.opened, ref); err == nil {
			return snap, nil
		}
		r.opened = nil // and read again from the repository as it is now
	}
	repo, err := git.PlainOpenWithOptions(r.repo, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return Snapshot{}, fmt.Errorf("open repository %s: %w", r.repo, err)
	}
	snap, err := r.fetch(ctx, repo, ref)
	if err == nil || errors.Is(err, ErrHeld) {
		r.opened = repo
	}
	return snap, err
}

// fetch reads the answer from repo at the commit of the branch's
// reference name (refs/heads/B in place, refs/remotes/origin/B in a cache).
func (r *gitRegistry) fetch(ctx context.Context, repo *git.Repository, name plumbing.ReferenceName) (Snapshot, error) {
	ref, err := repo.Reference(name, true)
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return Snapshot{}, fmt.Errorf("branch %s: not found in repository %s", r.branch, r.repo)
		}
		return Snapshot{}, fmt.Errorf("read branch %s of %s: %w", r.branch, r.repo, err)
	}
	head, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return Snapshot{}, fmt.Errorf("read the head commit %s of branch %s: %w", ref.Hash(), r.branch, err)
	}
	if err := r.descends(repo, head); err != nil {
		return Snapshot{}, err
	}
	if r.allowedSigners != "" {
		if err := r.checkSigned(head); err != nil {
			return Snapshot{}, err
		}
	}
	tree, err := head.Tree()
	if err != nil {
		return Snapshot{}, fmt.Errorf("read the tree of commit %s: %w", short(head.Hash), err)
	}
	if r.dir != "" {
		if tree, err = tree.Tree(r.dir); err != nil {
			return Snapshot{}, r.pathGone(head, err)
		}
	}
	commit := commitOf(head)
	if !r.inForce.IsZero() && tree.Hash == r.tree {
		r.inForce = head.Hash
		r.snap.Commit = commit
		return cloneSnapshot(r.snap), nil
	}
	snap, err := readTree(ctx, tree)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read %s at commit %s: %w", cmp.Or(r.dir, "the repository's root"), short(head.Hash), err)
	}
	snap.Commit = commit
	r.inForce, r.tree, r.snap = head.Hash, tree.Hash, snap
	return cloneSnapshot(snap), nil
}

// descends checks that head descends from the commit in force (or is it):
// a branch rewound to an older commit, or rewritten, is held.
func (r *gitRegistry) descends(repo *git.Repository, head *object.Commit) error {
	if r.unknown != "" {
		return r.heldUnknown(head.Hash, head.Message)
	}
	if r.inForce.IsZero() || head.Hash == r.inForce {
		return nil
	}
	old, err := repo.CommitObject(r.inForce)
	if err == nil {
		var ok bool
		if ok, err = old.IsAncestor(head); err == nil && ok {
			return nil
		}
		if ok, err2 := head.IsAncestor(old); err2 == nil && ok {
			return fmt.Errorf("%w: branch %s was rewound: its head %s (%s) is an ancestor of commit %s (%s) in force; nothing is synced from it — "+
				"push a commit on top of %s, or to accept the older commit re-add the registry (sluice registry add --update)",
				ErrHeld, r.branch, short(head.Hash), subject(head.Message), short(old.Hash), subject(old.Message), short(old.Hash))
		}
	}
	// Not a descendant (or the commit in force is gone from the repository:
	// nothing shows that the head descends from it).
	return fmt.Errorf("%w: branch %s was rewritten: its head %s (%s) does not descend from commit %s in force; nothing is synced from it — "+
		"restore the branch, or to accept its new history re-add the registry (sluice registry add --update)",
		ErrHeld, r.branch, short(head.Hash), subject(head.Message), short(r.inForce))
}

// pathGone is the error of a head commit whose tree has no directory
// Path. Before any answer it is the registry's spec that is wrong: an
// error. After one, a commit that descends from the commit in force
// removed (or moved) the directory, and with it every intent file: a mass
// deletion that Git cannot tell from a bad commit, so it is held, as the
// configurator holds an empty answer, never read as no intent at all.
func (r *gitRegistry) pathGone(head *object.Commit, err error) error {
	if r.inForce.IsZero() || !errors.Is(err, object.ErrDirectoryNotFound) {
		return fmt.Errorf("path %s: not a directory at commit %s of branch %s (%v)", r.dir, short(head.Hash), r.branch, err)
	}
	return fmt.Errorf("%w: path %s is not a directory at the head %s (%s) of branch %s, which descends from commit %s in force: "+
		"the commit removed or moved every intent file; nothing is synced from it, its intents stay as they are — "+
		"restore %s, or to delete them commit it holding no intent file (a README) and confirm the held deletion (sluice registry confirm)",
		ErrHeld, r.dir, short(head.Hash), subject(head.Message), r.branch, short(r.inForce), r.dir)
}

// readTree reads the intent files directly in tree.
func readTree(ctx context.Context, tree *object.Tree) (Snapshot, error) {
	entries := slices.Clone(tree.Entries)
	slices.SortFunc(entries, func(a, b object.TreeEntry) int { return strings.Compare(a.Name, b.Name) })
	snap := Snapshot{Documents: []Document{}}
	d := newDigest()
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, err
		}
		if e.Mode == filemode.Dir || !isIntentFile(e.Name) {
			continue
		}
		if e.Mode != filemode.Regular && e.Mode != filemode.Executable && e.Mode != filemode.Deprecated {
			err := fmt.Errorf("%s is %s in the repository, not a file: skipped", e.Name, entryKind(e.Mode))
			d.add(e.Name, "unreadable", err.Error())
			snap.Documents = append(snap.Documents, Document{Origin: e.Name, Err: err})
			continue
		}
		data, err := readBlob(tree, e)
		var big *tooLarge
		switch {
		case errors.As(err, &big):
			d.add(e.Name, "unreadable", err.Error())
			snap.Documents = append(snap.Documents, Document{Origin: e.Name, Err: err})
			continue
		case err != nil:
			// The repository's storage, not the file's content: the whole
			// answer is unknown.
			return Snapshot{}, err
		}
		d.add(e.Name, "file", string(data))
		ins, err := intent.Parse(e.Name, data)
		snap.Documents = append(snap.Documents, Document{Origin: e.Name, Intents: ins, Err: err})
	}
	snap.Version = d.String()
	return snap, nil
}

// tooLarge is a file over intent.MaxFileSize: an error of its document
// (its intents stay as they were), as for a directory's file.
type tooLarge struct {
	name string
	size int64
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("%s is %s bytes, over the limit of %s bytes (16 MiB) for one intent file; nothing was read: split it into several files",
		e.name, contract.Thousands(int(e.size)), contract.Thousands(intent.MaxFileSize))
}

// readBlob reads the file of e, at most intent.MaxFileSize bytes (else a
// *tooLarge). Any other error is the repository's.
func readBlob(tree *object.Tree, e object.TreeEntry) ([]byte, error) {
	f, err := tree.TreeEntryFile(&e)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", e.Name, err)
	}
	if f.Size > intent.MaxFileSize {
		return nil, &tooLarge{name: e.Name, size: f.Size}
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", e.Name, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(io.LimitReader(rd, intent.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", e.Name, err)
	}
	return data, nil
}

// entryKind names a tree entry's mode that is not a file.
func entryKind(m filemode.FileMode) string {
	switch m {
	case filemode.Symlink:
		return "a symbolic link"
	case filemode.Submodule:
		return "a submodule"
	}
	return "of mode " + m.String()
}

// commitOf is what an answer records of its commit.
func commitOf(c *object.Commit) *sluicev1.GitCommit {
	return &sluicev1.GitCommit{
		Hash:      c.Hash.String(),
		Subject:   subject(c.Message),
		Author:    fmt.Sprintf("%s <%s>", c.Author.Name, c.Author.Email),
		Committer: fmt.Sprintf("%s <%s>", c.Committer.Name, c.Committer.Email),
		Time:      timestamppb.New(c.Author.When),
	}
}

// subject is the first line of a commit message.
func subject(msg string) string {
	line, _, _ := strings.Cut(strings.TrimLeft(msg, "\n"), "\n")
	return strings.TrimSpace(line)
}

// short is a commit's hash as git log --oneline shows it.
func short(h plumbing.Hash) string { return h.String()[:12] }

// cloneSnapshot copies snap's intents: the configurator may change what
// it is given, and the registry keeps its answer to give it again.
func cloneSnapshot(snap Snapshot) Snapshot {
	out := Snapshot{Version: snap.Version, Documents: make([]Document, len(snap.Documents))}
	if snap.Commit != nil {
		out.Commit = proto.Clone(snap.Commit).(*sluicev1.GitCommit)
	}
	for i, d := range snap.Documents {
		ins := make([]*sluicev1.Intent, len(d.Intents))
		for j, in := range d.Intents {
			ins[j] = proto.Clone(in).(*sluicev1.Intent)
		}
		out.Documents[i] = Document{Origin: d.Origin, Intents: ins, Err: d.Err}
	}
	return out
}
