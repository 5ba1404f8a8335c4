// How a git registry's URL is read: the way git itself reads a
// repository's location (transport.c's is_url, connect.c's
// url_is_local_not_ssh and host_end).
//
//   - SCHEME://… is a URL: https://, http:// and ssh:// name a server,
//     file:// a repository on the configurator's host (git.go, git_remote.go).
//   - Else a location with a colon and no slash before its first colon is
//     scp-like ssh, [user@]host:path: git@git.example.net:net/intents.git.
//     The path is the server's: relative to the SSH user's home directory
//     unless it starts with /, as git sends it (git-upload-pack 'net/intents.git').
//   - Else it is a local path, even one with a colon in it
//     (/srv/git/net:v2.git, ./net:v2.git): the CLI makes it a file:// URL.
//
// go-git (5.19) reads an scp-like location by the same rule, so the URL is
// stored and fetched as given. The scp-like forms it would read otherwise
// than git are refused, naming what to write instead: a bracketed host
// ([host:port]:path, where git takes a port), a path that starts with
// digits and a colon (go-git takes them for a port, git for the path), and
// a host with more than one @.

package registry

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// scpURL is an scp-like location, [user@]host:path.
type scpURL struct {
	user, host, path string
}

// isSchemeURL: raw starts with SCHEME:// (git's is_url: a letter, then
// letters, digits, +, - or .).
func isSchemeURL(raw string) bool {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok || scheme == "" || !isLetter(scheme[0]) {
		return false
	}
	for i := range len(scheme) {
		c := scheme[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// isSCPLike: raw is no URL, has a colon, and no slash comes before its
// first colon (git's rule; on Linux there is no DOS drive to except).
func isSCPLike(raw string) bool {
	if isSchemeURL(raw) {
		return false
	}
	before, _, ok := strings.Cut(raw, ":")
	return ok && !strings.Contains(before, "/")
}

// IsLocalGitPath: raw is a local path as git reads it (neither a URL nor
// scp-like), such as /srv/git/net.git or ./net:v2.git.
func IsLocalGitPath(raw string) bool { return raw != "" && !isSchemeURL(raw) && !isSCPLike(raw) }

// LocalGitURL is the file:// URL of local path p, made absolute.
func LocalGitURL(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("git.url: %q: %w", p, err)
	}
	return (&url.URL{Scheme: "file", Path: abs}).String(), nil
}

// parseSCP reads an scp-like location, refusing what git would not read,
// or go-git would read otherwise.
func parseSCP(raw string) (scpURL, error) {
	hostPart, p, _ := strings.Cut(raw, ":")
	var s scpURL
	s.host, s.path = hostPart, p
	if i := strings.LastIndex(hostPart, "@"); i >= 0 {
		s.user, s.host = hostPart[:i], hostPart[i+1:]
	}
	ssh := func(why string) error {
		return fmt.Errorf("git.url: %q is scp-like ([user@]host:path) but %s; write it as ssh://[user@]host[:port]/path", raw, why)
	}
	switch {
	case strings.HasPrefix(hostPart, "[") || strings.HasPrefix(s.host, "["):
		return scpURL{}, ssh("has a bracketed host")
	case strings.Contains(s.user, "@"):
		return scpURL{}, ssh("names more than one @ before the host")
	case strings.Contains(hostPart, "@") && s.user == "":
		return scpURL{}, ssh("names an empty user")
	case s.host == "":
		return scpURL{}, ssh("names no host")
	case s.user == "" && slices.Contains([]string{"file", "http", "https", "ssh", "git"}, strings.ToLower(s.host)):
		// git would try ssh to a host named file: surely a URL that lost its //.
		return scpURL{}, fmt.Errorf("git.url: %q reads as scp-like, host %s and path %s, as git reads it: for a URL write %s://… (file:///path, https://host/path)",
			raw, s.host, s.path, strings.ToLower(s.host))
	case strings.ContainsFunc(hostPart, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return scpURL{}, ssh("has white space or a control character before the colon")
	case strings.HasPrefix(s.host, "-"):
		return scpURL{}, ssh("has a host starting with -, which ssh would take for an option")
	case s.path == "":
		return scpURL{}, fmt.Errorf("git.url: %q names no path after the colon: give [user@]host:path, such as git@git.example.net:net/intents.git", raw)
	case strings.HasPrefix(s.path, "-"):
		return scpURL{}, ssh("has a path starting with -, which git refuses")
	case strings.HasPrefix(s.path, `\`):
		return scpURL{}, ssh(`has a path starting with \`)
	case portLike(s.path):
		return scpURL{}, ssh("its path starts with digits and a colon, which could be read as a port")
	}
	return s, nil
}

// portLike: p starts with 1 to 5 digits and a colon (go-git's port in
// host:port:path; git reads the digits as the path's).
func portLike(p string) bool {
	digits, _, ok := strings.Cut(p, ":")
	if !ok || digits == "" || len(digits) > 5 {
		return false
	}
	return strings.Trim(digits, "0123456789") == ""
}

// shown is s without its user: host:path.
func (s scpURL) shown() string { return s.host + ":" + s.path }
