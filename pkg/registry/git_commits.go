// Reading a git registry at commits other than its head, for
// `sluice diff --git A..B`: the same repository a sync reads (in place, or
// a server's, fetched), the same tree reading (readTree), nothing written.
// A server's repository is fetched into memory, never into a cache.

package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/rs/zerolog"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// GitTree is a git registry's answer at one commit.
type GitTree struct {
	Rev      string // as asked
	Commit   *sluicev1.GitCommit
	Snapshot Snapshot
	// NoPath: the registry's path is not a directory at the commit, read
	// as holding no intent file.
	NoPath bool
}

// ReadGitCommits reads the registry of spec at each of revs, as a sync
// reads its head: a commit's hash (abbreviated or not), a branch or tag,
// or a revision such as HEAD~2, where HEAD is the head of the registry's
// branch. Location is where it read.
func ReadGitCommits(ctx context.Context, spec *sluicev1.RegistrySpec, revs ...string) (trees []GitTree, location string, err error) {
	g := spec.GetGit()
	if g == nil {
		return nil, "", fmt.Errorf("registry %s: %w", spec.GetName(), ErrNotGit)
	}
	reg, err := openGit(spec.GetName(), g, Options{}, zerolog.Nop())
	if err != nil {
		return nil, "", err
	}
	r := reg.(*gitRegistry)
	defer r.Close()
	var repo *git.Repository
	head := plumbing.NewBranchReferenceName(r.branch)
	if r.remote != nil {
		// cache "" (newRemote with no root): a clone in memory.
		if repo, err = r.remote.openCache(); err != nil {
			return nil, "", err
		}
		if err := r.remote.fetch(ctx, repo); err != nil {
			return nil, "", err
		}
		head = r.remote.trackingRef()
	} else if repo, err = git.PlainOpenWithOptions(r.repo, &git.PlainOpenOptions{EnableDotGitCommonDir: true}); err != nil {
		return nil, "", fmt.Errorf("open repository %s on this host: %w", r.repo, err)
	}
	for _, rev := range revs {
		t, err := r.readAt(ctx, repo, head, rev)
		if err != nil {
			return nil, "", err
		}
		trees = append(trees, t)
	}
	return trees, r.Location(), nil
}

// readAt reads the registry's path at revision rev of repo.
func (r *gitRegistry) readAt(ctx context.Context, repo *git.Repository, head plumbing.ReferenceName, rev string) (GitTree, error) {
	c, err := resolve(repo, head, rev)
	if err != nil {
		return GitTree{}, fmt.Errorf("%q: %w in %s (branch %s): give a commit's hash, a branch or tag, or HEAD~N", rev, ErrNoCommit, stripUserinfo(r.location), r.branch)
	}
	out := GitTree{Rev: rev, Commit: commitOf(c)}
	tree, err := c.Tree()
	if err != nil {
		return GitTree{}, fmt.Errorf("read the tree of commit %s: %w", short(c.Hash), err)
	}
	if r.dir != "" {
		if tree, err = tree.Tree(r.dir); errors.Is(err, object.ErrDirectoryNotFound) {
			out.NoPath, out.Snapshot = true, Snapshot{Documents: []Document{}}
			return out, nil
		} else if err != nil {
			return GitTree{}, fmt.Errorf("read %s at commit %s: %w", r.dir, short(c.Hash), err)
		}
	}
	if out.Snapshot, err = readTree(ctx, tree); err != nil {
		return GitTree{}, fmt.Errorf("read %s at commit %s: %w", r.dir, short(c.Hash), err)
	}
	out.Snapshot.Commit = out.Commit
	return out, nil
}

// resolve is the commit of rev; HEAD (and HEAD~N, HEAD^) is the branch's
// head, and in a server's clone a branch B is read at origin/B.
func resolve(repo *git.Repository, head plumbing.ReferenceName, rev string) (*object.Commit, error) {
	if rev == "HEAD" || strings.HasPrefix(rev, "HEAD~") || strings.HasPrefix(rev, "HEAD^") {
		rev = head.String() + strings.TrimPrefix(rev, "HEAD")
	}
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil && head.IsRemote() {
		h, err = repo.ResolveRevision(plumbing.Revision("origin/" + rev))
	}
	if err != nil {
		return nil, err
	}
	return repo.CommitObject(*h)
}
