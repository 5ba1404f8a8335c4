// Git registry of a server: a repository named by an https://, http:// or
// ssh:// URL, or an scp-like [user@]host:path (git_url.go), is fetched with go-git into a bare clone the configurator owns (one
// directory per registry under Options.GitCache, or memory), one branch
// only, and read there as a repository on the host is read (git.go): the
// same answer, the same holds.
//
// A fetch that fails (the server down or refusing, a timeout, a branch
// gone from the server) is an error, the configurator's "unreachable":
// the commit in force stays, never an empty answer. The clone keeps every
// commit it fetched, so a force-push that rewinds or rewrites the branch
// is seen against the commit in force and held (ErrHeld), as in place.
//
// Credentials come from files named in the spec, read at each fetch (a
// rotated token is used at the next one): token_file holds an access token
// sent as HTTP basic auth, the URL's user (or x-access-token, which GitHub
// takes; GitLab takes any user) with the token as password. A URL with a
// password is refused. An ssh:// server takes the key in ssh_key_file
// (the URL's user, or git) and its host key is checked against
// known_hosts_file; both are required. Neither the token nor the URL's user information is
// ever in a Location, an error or a log line: errors are scrubbed of the
// token besides.

package registry

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// DefaultGitTokenUser is the basic-auth user sent with a token when the
// URL names none.
const DefaultGitTokenUser = "x-access-token"

// DefaultGitSSHUser is the SSH user of an ssh:// URL that names none.
const DefaultGitSSHUser = "git"

// remote is where a git registry of a server fetches from and to.
type remote struct {
	registry  string // the registry's name, for errors
	url       string // as given, with the URL's user if any (never a password)
	shown     string // url without user information
	branch    string
	user      string // basic-auth user with a token
	tokenFile string
	caFile    string
	sshKey    string // ssh://: the private key file
	knownHost string // ssh://: the known_hosts file
	cache     string // the bare clone's directory; "" = memory
}

// IsRemoteGitURL: u names a Git server (https:// or http://), whose
// repository is fetched into the cache, not one on this host.
func IsRemoteGitURL(u string) bool { return isRemoteURL(u) }

// ShownURL is raw as it may be shown: without user information.
func ShownURL(raw string) string { return stripUserinfo(raw) }

// isRemoteURL: u names a server, not a repository on this host: an
// https://, http:// or ssh:// URL, or an scp-like [user@]host:path
// (git_url.go).
func isRemoteURL(u string) bool {
	if isSCPLike(u) {
		return true
	}
	s, _, ok := strings.Cut(u, "://")
	return ok && (strings.EqualFold(s, "https") || strings.EqualFold(s, "http") || strings.EqualFold(s, "ssh"))
}

// checkRemote checks the spec of a git registry of a server.
func checkRemote(spec *sluicev1.GitRegistry) error {
	raw := spec.GetUrl()
	if isSCPLike(raw) {
		if _, err := parseSCP(raw); err != nil {
			return err
		}
		return checkSSH(spec)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("git.url: %q does not parse as a URL", stripUserinfo(raw))
	}
	if _, ok := u.User.Password(); ok {
		return fmt.Errorf("git.url: %q carries a password, which would be readable in the control bucket: "+
			"remove it from the URL and put the token in a file named by git.token_file", stripUserinfo(raw))
	}
	https, ssh := strings.EqualFold(u.Scheme, "https"), strings.EqualFold(u.Scheme, "ssh")
	if ssh {
		if u.Host == "" {
			return fmt.Errorf("git.url: %q names no host", stripUserinfo(raw))
		}
		return checkSSH(spec)
	}
	if spec.GetSshKeyFile() != "" || spec.GetKnownHostsFile() != "" {
		return errors.New("git.ssh_key_file and git.known_hosts_file go with an ssh:// URL")
	}
	switch {
	case u.Host == "":
		return fmt.Errorf("git.url: %q names no host", stripUserinfo(raw))
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("git.url: %q has a query or fragment: give the repository's clone URL", stripUserinfo(raw))
	}
	if f := spec.GetTokenFile(); f != "" {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("git.token_file: %q is not an absolute path", f)
		}
		if !https {
			return errors.New("git.token_file: set with an http:// URL, which would send the token unencrypted; use https://")
		}
	}
	if f := spec.GetCaFile(); f != "" {
		if !filepath.IsAbs(f) {
			return fmt.Errorf("git.ca_file: %q is not an absolute path", f)
		}
		if !https {
			return errors.New("git.ca_file: set, but git.url is not https://, so TLS is not used; use https:// or leave ca_file empty")
		}
	}
	return nil
}

// checkSSH checks the rest of the spec of an ssh:// or scp-like URL whose
// host was checked: a key and a known_hosts file, both absolute; no token,
// no CA.
func checkSSH(spec *sluicev1.GitRegistry) error {
	switch {
	case spec.GetTokenFile() != "" || spec.GetCaFile() != "":
		return errors.New("git.token_file and git.ca_file go with an https:// URL, not ssh:// (give git.ssh_key_file)")
	case spec.GetSshKeyFile() == "":
		return errors.New("git.ssh_key_file: required with an ssh:// URL: the private key that authenticates to the server")
	case !filepath.IsAbs(spec.GetSshKeyFile()):
		return fmt.Errorf("git.ssh_key_file: %q is not an absolute path", spec.GetSshKeyFile())
	case spec.GetKnownHostsFile() == "":
		return errors.New("git.known_hosts_file: required with an ssh:// URL: the server's host key is checked against it (ssh-keyscan HOST >> FILE, then check the fingerprint)")
	case !filepath.IsAbs(spec.GetKnownHostsFile()):
		return fmt.Errorf("git.known_hosts_file: %q is not an absolute path", spec.GetKnownHostsFile())
	}
	return nil
}

// stripUserinfo is raw without user information (user and password): what
// is shown of a URL; an scp-like one is host:path. raw that does not parse
// is cut at its last '@' before the path.
func stripUserinfo(raw string) string {
	if isSCPLike(raw) {
		if s, err := parseSCP(raw); err == nil {
			return s.shown()
		}
		if i := strings.LastIndex(raw[:strings.Index(raw, ":")], "@"); i >= 0 {
			return raw[i+1:]
		}
		return raw
	}
	u, err := url.Parse(raw)
	if err == nil {
		if u.User == nil {
			return raw
		}
		u.User = nil
		return u.String()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	host, p, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	return scheme + "://" + host + "/" + p
}

// newRemote is the remote of a checked spec; cacheRoot "" keeps the clone
// in memory.
func newRemote(name string, spec *sluicev1.GitRegistry, branch, cacheRoot string) *remote {
	rm := &remote{registry: name, url: spec.GetUrl(), shown: stripUserinfo(spec.GetUrl()), branch: branch,
		user: DefaultGitTokenUser, tokenFile: spec.GetTokenFile(), caFile: spec.GetCaFile(),
		sshKey: spec.GetSshKeyFile(), knownHost: spec.GetKnownHostsFile()}
	if rm.sshKey != "" {
		rm.user = DefaultGitSSHUser
	}
	if s, err := parseSCP(rm.url); isSCPLike(rm.url) && err == nil && s.user != "" {
		rm.user = s.user
	} else if u, err := url.Parse(rm.url); err == nil && u.User != nil && u.User.Username() != "" {
		rm.user = u.User.Username()
	}
	if cacheRoot != "" {
		rm.cache = filepath.Join(cacheRoot, cloneDir(name, rm.url))
	}
	return rm
}

// cloneDir is the directory of the bare clone of registry name's url under
// the git cache: one per registry and URL, so that a registry re-added
// with another URL never reads the clone of the old one.
func cloneDir(name, rawURL string) string {
	sum := sha256.Sum256([]byte(rawURL))
	return name + "-" + hex.EncodeToString(sum[:8]) + ".git"
}

// CloneDir is the directory under the git cache that holds the clone of
// spec's repository ("<name>-<hash of the URL>.git"), or "" when spec has
// no clone there (not a git registry of a server).
func CloneDir(spec *sluicev1.RegistrySpec) string {
	g := spec.GetGit()
	if g == nil || !isRemoteURL(g.GetUrl()) {
		return ""
	}
	return cloneDir(spec.GetName(), g.GetUrl())
}

// RegistryOfCloneDir is the registry whose clone a directory of the git
// cache named base is, when base has the form CloneDir gives
// ("<name>-<16 hex digits>.git", a valid registry name); ok is false for
// every other name: not the configurator's.
func RegistryOfCloneDir(base string) (name string, ok bool) {
	stem, found := strings.CutSuffix(base, ".git")
	i := strings.LastIndexByte(stem, '-')
	if !found || i < 0 {
		return "", false
	}
	name, sum := stem[:i], stem[i+1:]
	if len(sum) != 16 || strings.Trim(sum, "0123456789abcdef") != "" || contract.ValidRegistryName(name) != nil {
		return "", false
	}
	return name, true
}

// trackingRef is where the fetched branch is kept in the clone.
func (rm *remote) trackingRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", rm.branch)
}

// fetchRemote fetches the branch into the clone and reads it there.
func (r *gitRegistry) fetchRemote(ctx context.Context) (Snapshot, error) {
	rm := r.remote
	if r.opened == nil {
		repo, err := rm.openCache()
		if err != nil {
			return Snapshot{}, err
		}
		r.opened = repo
	}
	if err := rm.fetch(ctx, r.opened); err != nil {
		return Snapshot{}, err
	}
	snap, err := r.fetch(ctx, r.opened, rm.trackingRef())
	if err != nil && !errors.Is(err, ErrHeld) {
		// The clone may be what is wrong: opened anew at the next fetch.
		r.opened = nil
	}
	return snap, err
}

// openCache opens the bare clone, made anew when it is missing or cannot
// be opened (it is the configurator's own: nothing but fetched objects).
func (rm *remote) openCache() (*git.Repository, error) {
	var repo *git.Repository
	var err error
	if rm.cache == "" {
		repo, err = git.Init(memory.NewStorage(), nil)
	} else {
		repo, err = git.PlainOpen(rm.cache)
		if err != nil {
			if err := os.RemoveAll(rm.cache); err != nil {
				return nil, fmt.Errorf("remove the unreadable clone %s: %w", rm.cache, err)
			}
			if err := os.MkdirAll(filepath.Dir(rm.cache), 0o700); err != nil {
				return nil, fmt.Errorf("make the git cache directory: %w", err)
			}
			repo, err = git.PlainInit(rm.cache, true)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("make the clone of %s in %s: %w", rm.shown, cmp.Or(rm.cache, "memory"), err)
	}
	want := &config.RemoteConfig{Name: "origin", URLs: []string{rm.url},
		Fetch: []config.RefSpec{config.RefSpec("+" + plumbing.NewBranchReferenceName(rm.branch).String() + ":" + rm.trackingRef().String())}}
	if cur, err := repo.Remote("origin"); err == nil {
		if c := cur.Config(); len(c.URLs) == 1 && c.URLs[0] == rm.url && len(c.Fetch) == 1 && c.Fetch[0] == want.Fetch[0] {
			return repo, nil
		}
		if err := repo.DeleteRemote("origin"); err != nil {
			return nil, fmt.Errorf("reset the remote of the clone %s: %w", rm.cache, err)
		}
	}
	if _, err := repo.CreateRemote(want); err != nil {
		return nil, fmt.Errorf("set the remote of the clone %s: %w", cmp.Or(rm.cache, "in memory"), err)
	}
	return repo, nil
}

// fetch fetches the branch from the server. Up to date is no error.
func (rm *remote) fetch(ctx context.Context, repo *git.Repository) error {
	opts := &git.FetchOptions{RemoteName: "origin", Tags: git.NoTags, Force: true}
	var token string
	if rm.tokenFile != "" {
		var err error
		if token, err = readTokenFile(rm.tokenFile); err != nil {
			return err
		}
		opts.Auth = &githttp.BasicAuth{Username: rm.user, Password: token}
	}
	if rm.sshKey != "" {
		auth, err := gitssh.NewPublicKeysFromFile(rm.user, rm.sshKey, "")
		if err != nil {
			return fmt.Errorf("git.ssh_key_file %s: %w (an unencrypted private key is needed)", rm.sshKey, err)
		}
		if auth.HostKeyCallback, err = gitssh.NewKnownHostsCallback(rm.knownHost); err != nil {
			return fmt.Errorf("git.known_hosts_file %s: %w", rm.knownHost, err)
		}
		opts.Auth = auth
	}
	if rm.caFile != "" {
		ca, err := readGitCA(rm.caFile)
		if err != nil {
			return err
		}
		opts.CABundle = ca
	}
	err := repo.FetchContext(ctx, opts)
	switch {
	case err == nil, errors.Is(err, git.NoErrAlreadyUpToDate):
		return nil
	}
	what := fmt.Sprintf("registry %s: fetch branch %s of %s", rm.registry, rm.branch, rm.shown)
	switch {
	case rm.sshKey != "" && strings.Contains(err.Error(), "unable to authenticate"):
		err = fmt.Errorf("%s: authentication failed: the server refused the key of %s; add its public key to the repository's deploy keys: %w", what, rm.sshKey, err)
	case rm.sshKey != "" && (strings.Contains(err.Error(), "knownhosts:") || strings.Contains(err.Error(), "host key")):
		err = fmt.Errorf("%s: the server's host key is not the one in %s, or is not there: %w", what, rm.knownHost, err)
	case errors.Is(err, transport.ErrAuthenticationRequired) && rm.tokenFile == "":
		// The server's own words (its 401 page) add nothing.
		err = fmt.Errorf("%s: %w: the server asks for credentials; "+
			"put an access token in a file on the configurator's host and name it (sluice registry add %s --git URL --git-token-file FILE --update)",
			what, transport.ErrAuthenticationRequired, rm.registry)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		sentinel := transport.ErrAuthenticationRequired
		if errors.Is(err, transport.ErrAuthorizationFailed) {
			sentinel = transport.ErrAuthorizationFailed
		}
		err = fmt.Errorf("%s: authentication failed: the server refused the token read from %s (%w); "+
			"check that it is current and may read the repository", what, rm.tokenFile, sentinel)
	case errors.Is(err, git.NoMatchingRefSpecError{}):
		err = fmt.Errorf("%s: branch %s: not found on the server: %w", what, rm.branch, err)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		err = fmt.Errorf("%s: the server has no such repository (or hides it from these credentials): %w", what, err)
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		err = fmt.Errorf("%s: the repository is empty: %w", what, err)
	default:
		err = fmt.Errorf("%s: %w", what, err)
	}
	return scrub(err, token, rm.url)
}

// scrub is err with every occurrence of the secrets in its message
// replaced: the token, and the URL as given (its user information). It
// stays matchable as err is.
func scrub(err error, token, rawURL string) error {
	msg := err.Error()
	clean := strings.TrimSpace(msg) // a server's reason may end in a newline
	if rawURL != "" && rawURL != stripUserinfo(rawURL) {
		clean = strings.ReplaceAll(clean, rawURL, stripUserinfo(rawURL))
	}
	if token != "" {
		clean = strings.ReplaceAll(clean, token, "[token]")
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// readTokenFile returns the token in file, without surrounding white
// space. Its errors never hold the file's content.
func readTokenFile(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read git.token_file: %w", err)
	}
	tok := string(bytes.TrimSpace(data))
	if tok == "" {
		return "", fmt.Errorf("git.token_file %s is empty", file)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("git.token_file %s holds more than one line: give the token alone", file)
	}
	return tok, nil
}

// readGitCA returns the PEM bundle in file, checked to hold a certificate.
func readGitCA(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read git.ca_file: %w", err)
	}
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil, fmt.Errorf("git.ca_file %s holds no PEM certificate", file)
		}
		if _, err := x509.ParseCertificate(b.Bytes); b.Type == "CERTIFICATE" && err == nil {
			return data, nil
		}
	}
}
