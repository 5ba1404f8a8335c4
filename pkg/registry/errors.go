package registry

import "errors"

// The errors of this package that a caller branches on (errors.Is): Fetch
// returns ErrHeld, ReadGitCommits ErrNotGit and ErrNoCommit, and a
// document's Err wraps ErrUnmapped when its intent is in force all the
// same. Any other error of Fetch is a registry that could not be read:
// nothing is known, nothing changes.

// ErrHeld: the registry answered, but its answer must not be merged
// without an operator (a git branch rewound or rewritten, or a commit that
// removed the intents' directory). Nothing is changed, as for an
// unreachable registry; the configurator reports it as held.
var ErrHeld = errors.New("held")

// ErrNotGit: a registry that is not a git registry was asked for commits.
var ErrNotGit = errors.New("not a git registry")

// ErrNoCommit: a revision names no commit of the repository.
var ErrNoCommit = errors.New("no such commit")

// ErrUnmapped: a resource has fields sluice has no meaning for; its intent
// is in force without them.
var ErrUnmapped = errors.New("sluice has no meaning for these fields yet; the intent is in force without them")
