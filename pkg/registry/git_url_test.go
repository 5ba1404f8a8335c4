package registry_test

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A git registry's URL is read as git reads a repository's location: a
// SCHEME:// URL, else scp-like [user@]host:path when no slash comes before
// the first colon, else a local path (a colon in it or not). An scp-like
// location is ssh (a key and known hosts required), shown without its
// user, and read by go-git with the same user, host and path; the forms
// go-git would read otherwise than git are refused, naming git.url.
func TestGitURL_ReadAsGitReadsIt(t *testing.T) {
	tests := []struct {
		name      string
		given     string
		wantLocal bool   // a local path (the CLI makes it file://)
		wantShown string // the location's URL, for a valid scp-like or URL
		user      string // what go-git reads of a valid scp-like location
		host      string
		path      string
		wantErr   string
	}{
		{name: "scp with a user", given: "git@git.example.net:net/intents.git", wantShown: "git.example.net:net/intents.git",
			user: "git", host: "git.example.net", path: "net/intents.git"},
		{name: "scp without a user", given: "git.example.net:intents.git", wantShown: "git.example.net:intents.git",
			host: "git.example.net", path: "intents.git"},
		{name: "scp absolute path", given: "deploy@10.0.0.7:/srv/git/net.git", wantShown: "10.0.0.7:/srv/git/net.git",
			user: "deploy", host: "10.0.0.7", path: "/srv/git/net.git"},
		{name: "scp path with a colon", given: "git@host:net/v2:old.git", wantShown: "host:net/v2:old.git",
			user: "git", host: "host", path: "net/v2:old.git"},
		{name: "scp home path", given: "host:~ada/net.git", wantShown: "host:~ada/net.git", host: "host", path: "~ada/net.git"},
		{name: "ssh URL", given: "ssh://git@git.example.net/net.git", wantShown: "ssh://git.example.net/net.git"},
		{name: "absolute path with a colon", given: "/srv/git/net:v2.git", wantLocal: true},
		{name: "relative path with a colon", given: "./net:v2.git", wantLocal: true},
		{name: "path with a slash before the colon", given: "srv/a:b", wantLocal: true},
		{name: "plain relative path", given: "net.git", wantLocal: true},
		{name: "scp without a path", given: "git@host:", wantErr: `git.url: "git@host:" names no path after the colon`},
		{name: "scp without a host", given: ":net.git", wantErr: `git.url: ":net.git" is scp-like ([user@]host:path) but names no host; write it as ssh://`},
		{name: "scp with an empty user", given: "@host:net.git", wantErr: "names an empty user"},
		{name: "scp with two users", given: "a@b@host:net.git", wantErr: "names more than one @"},
		{name: "scp bracketed host and port", given: "[git.example.net:2222]:net.git", wantErr: "has a bracketed host; write it as ssh://[user@]host[:port]/path"},
		{name: "scp bracketed after the user", given: "git@[::1]:net.git", wantErr: "has a bracketed host"},
		{name: "scp path that looks like a port", given: "git@host:2222:net.git", wantErr: "could be read as a port"},
		{name: "scp host that is an option", given: "-oProxyCommand=x:net.git", wantErr: "has a host starting with -"},
		{name: "scp path that is an option", given: "host:--upload-pack=x", wantErr: "has a path starting with -"},
		{name: "scp host with a space", given: "git host:net.git", wantErr: "white space"},
		{name: "a URL without its slashes", given: "https:git.example.net/net.git", wantErr: "reads as scp-like, host https and path git.example.net/net.git, as git reads it: for a URL write https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := registry.IsLocalGitPath(tt.given); got != tt.wantLocal {
				t.Fatalf("IsLocalGitPath(%q) = %t, want %t", tt.given, got, tt.wantLocal)
			}
			if tt.wantLocal {
				u, err := registry.LocalGitURL(tt.given)
				if err != nil || !strings.HasPrefix(u, "file:///") {
					t.Fatalf("LocalGitURL(%q) = %q, %v; want a file:/// URL", tt.given, u, err)
				}
				if err := checkLocal(u); err != nil {
					t.Errorf("the file URL %s of %q does not check: %v", u, tt.given, err)
				}
				if err := checkLocal(tt.given); err == nil || !strings.Contains(err.Error(), "is a path, not a URL: give file://") {
					t.Errorf("a stored path %q: error %v, want it refused naming file://", tt.given, err)
				}
				return
			}
			err := check(tt.given)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want none", err)
			}
			if !registry.IsRemoteGitURL(tt.given) || registry.ShownURL(tt.given) != tt.wantShown {
				t.Errorf("remote %t, shown %q; want remote, %q", registry.IsRemoteGitURL(tt.given), registry.ShownURL(tt.given), tt.wantShown)
			}
			if tt.host == "" {
				return
			}
			// go-git, which fetches it, reads it the same way.
			ep, err := transport.NewEndpoint(tt.given)
			if err != nil || ep.Protocol != "ssh" || ep.User != tt.user || ep.Host != tt.host || ep.Port != 22 || ep.Path != tt.path {
				t.Errorf("go-git reads %q as %+v (%v); want ssh, user %q, host %q, port 22, path %q", tt.given, ep, err, tt.user, tt.host, tt.path)
			}
		})
	}
}

// check checks a git registry of url with an SSH key and known hosts.
func check(url string) error {
	return registry.Check(&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: url,
		SshKeyFile: "/etc/sluice/git-key", KnownHostsFile: "/etc/sluice/known_hosts"}}})
}

// checkLocal checks a git registry of url with no credentials.
func checkLocal(url string) error {
	return registry.Check(&sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Git{Git: &sluicev1.GitRegistry{Url: url}}})
}
