package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// gitStore is a git registry: a repository the harness makes with go-git
// (in this process, no git binary: the bubble of virtual time sees its
// file I/O as it sees the directory's), read by the configurator in place
// (`sluice registry add --git-dir DIR --branch main --path intents`).
// Intent i is the file intents/regFile(i) at the head of branch main; the
// configurator reads the branch, never the working tree, so every change
// is a commit and each is atomic as an answer sees it (the branch moves
// from one commit to the next).
//
//   - fill commits a README under intents/ (the root commit: the path
//     exists, no intent), then one commit per intent, so that fills[k] is
//     an older commit holding intents 0 … k;
//   - drop is a commit deleting the file, back a commit adding it;
//   - vanish moves the repository away (the configurator cannot open it:
//     unreachable); reappear puts it back with the branch force-pushed to
//     the root commit (an older commit, holding no intent), which the
//     configurator must hold (its head is an ancestor of the commit in
//     force). back then commits on that rewound branch (a rewritten
//     history, held as well), and once every intent the branch held
//     before vanish is back, the harness merges the old head in (an
//     operator restoring the history): the branch descends from the
//     commit in force again and is synced;
//   - rewind force-pushes the branch to fills[keep], restore puts the
//     old head back (the registry-rewind fault): the configurator must
//     hold, not sync the older commit's missing intents toward deletion.
type gitStore struct {
	repo  string // the working tree; its .git is the registry's git.dir
	aside string // where vanish moves it

	mu     sync.Mutex
	r      *git.Repository
	fills  []plumbing.Hash // fills[0] the root (README only), fills[k] intents 0 … k-1
	before plumbing.Hash   // the head before vanish or rewind; zero when the branch is whole
	held   []int           // the intents at before (vanish)
}

const (
	gitBranch = "main"
	gitPath   = "intents"
)

func newGitStore(root string) *gitStore {
	return &gitStore{repo: filepath.Join(root, "repo"), aside: filepath.Join(root, "repo.away")}
}

func (g *gitStore) kind() string { return "git" }
func (g *gitStore) String() string {
	return fmt.Sprintf("git %s branch %s path %s", g.repo, gitBranch, gitPath)
}

var gitSig = object.Signature{Name: "chaos", Email: "chaos@sluice.test"}

// commit records the working tree's intents/ as a commit on the branch,
// with parents besides HEAD if given (a merge).
func (g *gitStore) commit(msg string, parents ...plumbing.Hash) (plumbing.Hash, error) {
	wt, err := g.r.Worktree()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		return plumbing.ZeroHash, fmt.Errorf("git add: %w", err)
	}
	sig := gitSig
	sig.When = time.Now()
	opts := &git.CommitOptions{Author: &sig, Committer: &sig, AllowEmptyCommits: true}
	if len(parents) > 0 {
		head, err := g.r.Head()
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("read HEAD: %w", err)
		}
		opts.Parents = append([]plumbing.Hash{head.Hash()}, parents...)
	}
	h, err := wt.Commit(msg, opts)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("git commit %q: %w", msg, err)
	}
	return h, nil
}

func (g *gitStore) fill(n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, err := git.PlainInitWithOptions(g.repo, &git.PlainInitOptions{
		InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName(gitBranch)}})
	if err != nil {
		return fmt.Errorf("git init %s: %w", g.repo, err)
	}
	g.r = r
	dir := filepath.Join(g.repo, gitPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("the chaos suite's registry intents\n"), 0o644); err != nil {
		return err
	}
	h, err := g.commit("chaos: the registry's directory")
	if err != nil {
		return err
	}
	g.fills = []plumbing.Hash{h}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, regFile(i)), regDoc(i), 0o644); err != nil {
			return err
		}
		if h, err = g.commit("chaos: add " + regName(i)); err != nil {
			return err
		}
		g.fills = append(g.fills, h)
	}
	return nil
}

func (g *gitStore) source(spec *sluicev1.RegistrySpec) {
	spec.Source = &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Dir: g.repo, Branch: gitBranch, Path: gitPath}}
}

func (g *gitStore) drop(i int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := os.Remove(filepath.Join(g.repo, gitPath, regFile(i))); err != nil {
		return fmt.Errorf("remove %s: %w", regFile(i), err)
	}
	_, err := g.commit("chaos: drop " + regName(i))
	return err
}

func (g *gitStore) back(i int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := os.WriteFile(filepath.Join(g.repo, gitPath, regFile(i)), regDoc(i), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", regFile(i), err)
	}
	if _, err := g.commit("chaos: bring back " + regName(i)); err != nil {
		return err
	}
	if g.before.IsZero() || len(g.held) == 0 {
		return nil
	}
	// On the branch rewritten after vanish: once it holds every intent
	// the old head held, merge the old head in, so that the branch
	// descends from the commit in force again.
	now, err := g.heads()
	if err != nil {
		return err
	}
	for _, j := range g.held {
		if !slices.Contains(now, j) {
			return nil
		}
	}
	if _, err := g.commit("chaos: merge the history back", g.before); err != nil {
		return err
	}
	g.before, g.held = plumbing.ZeroHash, nil
	return nil
}

func (g *gitStore) vanish() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	head, err := g.r.Head()
	if err != nil {
		return fmt.Errorf("read HEAD: %w", err)
	}
	held, err := g.heads()
	if err != nil {
		return err
	}
	if err := os.Rename(g.repo, g.aside); err != nil {
		return fmt.Errorf("move the repository away: %w", err)
	}
	g.before, g.held = head.Hash(), held
	return nil
}

func (g *gitStore) reappear() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := os.Rename(g.aside, g.repo); err != nil {
		return fmt.Errorf("put the repository back: %w", err)
	}
	r, err := git.PlainOpen(g.repo)
	if err != nil {
		return fmt.Errorf("open the repository again: %w", err)
	}
	g.r = r
	return g.reset(g.fills[0])
}

// reset force-pushes the branch to h: the branch and the working tree.
func (g *gitStore) reset(h plumbing.Hash) error {
	wt, err := g.r.Worktree()
	if err != nil {
		return err
	}
	// HEAD names the branch: a hard reset moves the branch itself.
	if err := wt.Reset(&git.ResetOptions{Commit: h, Mode: git.HardReset}); err != nil {
		return fmt.Errorf("git reset --hard %s: %w", h.String()[:12], err)
	}
	return nil
}

// rewind force-pushes the branch to the older commit holding intents
// 0 … keep-1 (every later intent missing from it); restore puts the head
// it had back.
func (g *gitStore) rewind(keep int) (from, to string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.before.IsZero() {
		return "", "", errors.New("rewind: the branch is already rewound")
	}
	head, err := g.r.Head()
	if err != nil {
		return "", "", fmt.Errorf("read HEAD: %w", err)
	}
	if err := g.reset(g.fills[keep]); err != nil {
		return "", "", err
	}
	g.before = head.Hash()
	return head.Hash().String(), g.fills[keep].String(), nil
}

func (g *gitStore) restore() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.before.IsZero() {
		return errors.New("restore: the branch is not rewound")
	}
	if err := g.reset(g.before); err != nil {
		return err
	}
	g.before = plumbing.ZeroHash
	return nil
}

func (g *gitStore) list() ([]int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := os.Stat(g.repo); os.IsNotExist(err) {
		return nil, nil
	}
	return g.heads()
}

// heads names the intents at the branch's head commit, as the
// configurator reads them.
func (g *gitStore) heads() ([]int, error) {
	head, err := g.r.Head()
	if err != nil {
		return nil, fmt.Errorf("read HEAD: %w", err)
	}
	c, err := g.r.CommitObject(head.Hash())
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head.Hash(), err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	var out []int
	for i := range maxRegIntents {
		switch _, err := tree.File(gitPath + "/" + regFile(i)); {
		case err == nil:
			out = append(out, i)
		case !errors.Is(err, object.ErrFileNotFound):
			return nil, err
		}
	}
	return out, nil
}
