// Package registryspec builds and stores the RegistrySpec of a registry the
// configurator syncs besides its own API: what `sluice registry add` and
// `sluice dev --redis --watch-dir` write to control/registry.<name>.
// Entry points: Build makes a checked spec, Put stores it.
package registryspec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Errors, matched with errors.Is.
var (
	// ErrInvalid: the spec fails registry.Check; the error names the field.
	ErrInvalid = errors.New("invalid registry")
	// ErrExists: a spec is stored under the name and replacing was not asked for.
	ErrExists = errors.New("already exists")
)

// Options say where a registry reads and how it is synced. Redis wins over
// Dir, Dir over Git, Git over GitDir, GitDir over Kubernetes; with none the
// spec names no source and Build says so.
type Options struct {
	Redis        string // redis:// or rediss:// URL, without a password
	Prefix       string // key prefix; "" = registry.DefaultRedisPrefix
	PasswordFile string // read by the configurator
	CAFile       string // PEM CA bundle for rediss:// or a git https:// URL
	// Dir is a directory on the configurator's host; a relative one is made
	// absolute against this process's working directory.
	Dir string
	// Poll: the directory is read every sync interval and never watched.
	Poll bool
	// Git is the URL of a repository (https://, http://, ssh://, scp-like
	// [user@]host:path, or file://), or a local path as git reads one (no
	// URL, and a slash before any colon), made a file:// URL of its
	// absolute path; GitDir a repository's directory on the configurator's
	// host, made absolute as Dir is.
	Git, GitDir  string
	GitTokenFile string // with an https:// Git: the file holding its access token
	// RequireSigned is a file of allowed keys (armored OpenPGP public keys
	// or an SSH allowed_signers file): a Git head commit not signed by a
	// key of it is held.
	RequireSigned string
	// GitSSHKeyFile and GitKnownHosts: with an ssh:// Git, the private key
	// that authenticates and the known_hosts file of the server's host key.
	GitSSHKeyFile, GitKnownHosts string
	// Kubernetes: custom resources on a Kubernetes API server, reached with
	// Kubeconfig (a file on the configurator's host, made absolute; "" =
	// in-cluster), in Namespace ("" = every namespace), of KubeKinds
	// (none = every kind the registry reads).
	Kubernetes            bool
	Kubeconfig, Namespace string
	KubeKinds             []string
	Branch                string        // "" = registry.DefaultGitBranch
	Path                  string        // the directory inside the repository; "" = its root
	SyncInterval          time.Duration // 0 = registry.DefaultSyncInterval
	HoldShare             float64       // 0 = registry.DefaultHoldShare
}

// Build returns the spec of registry name, recording who added it and
// when, checked with registry.Check (an ErrInvalid naming the field).
func Build(name string, o Options, by string, at time.Time) (*sluicev1.RegistrySpec, error) {
	spec := &sluicev1.RegistrySpec{Name: name, HoldShare: o.HoldShare, By: by, At: timestamppb.New(at)}
	if o.SyncInterval != 0 {
		spec.SyncInterval = durationpb.New(o.SyncInterval)
	}
	switch {
	case o.Redis != "":
		spec.Source = &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{
			Url: o.Redis, Prefix: o.Prefix, PasswordFile: o.PasswordFile, CaFile: o.CAFile,
		}}
	case o.Dir != "":
		abs, err := filepath.Abs(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("directory %s: %w", o.Dir, err)
		}
		spec.Source = &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: abs, Poll: o.Poll}}
	case o.Git != "" || o.GitDir != "":
		g := &sluicev1.GitRegistry{Url: o.Git, Branch: o.Branch, Path: o.Path, TokenFile: o.GitTokenFile, AllowedSignersFile: o.RequireSigned,
			SshKeyFile: o.GitSSHKeyFile, KnownHostsFile: o.GitKnownHosts}
		if o.Git != "" {
			g.CaFile = o.CAFile
		}
		if registry.IsLocalGitPath(o.Git) {
			// As git reads it (git clone /srv/git/net:v2.git): a path,
			// even with a colon, when a slash comes before the colon.
			u, err := registry.LocalGitURL(o.Git)
			if err != nil {
				return nil, err
			}
			g.Url = u
		}
		if o.Git == "" {
			abs, err := filepath.Abs(o.GitDir)
			if err != nil {
				return nil, fmt.Errorf("git directory %s: %w", o.GitDir, err)
			}
			g.Dir = abs
		}
		spec.Source = &sluicev1.RegistrySpec_Git{Git: g}
	case o.Kubernetes:
		k := &sluicev1.KubernetesRegistry{Namespace: o.Namespace, Kinds: o.KubeKinds}
		if o.Kubeconfig != "" {
			abs, err := filepath.Abs(o.Kubeconfig)
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
			}
			k.Kubeconfig = abs
		}
		spec.Source = &sluicev1.RegistrySpec_Kubernetes{Kubernetes: k}
	}
	if err := registry.Check(spec); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, name, err)
	}
	return spec, nil
}

// Put stores spec at control/registry.<name> and reports whether it
// replaced one. An existing spec is replaced only with replace, by a
// compare-and-set on the revision read, so that a change made meanwhile is
// not overwritten; otherwise Put returns ErrExists.
func Put(ctx context.Context, control jetstream.KeyValue, spec *sluicev1.RegistrySpec, replace bool) (replaced bool, err error) {
	specs := store.New(control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	key := contract.RegistryKey(spec.GetName())
	cur, err := specs.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil && !errors.Is(err, store.ErrUndecodable): // an undecodable spec can be replaced
		return false, fmt.Errorf("read registry %s: %w", spec.GetName(), err)
	case !replace && cur.Value != nil:
		return false, fmt.Errorf("registry %s %w (%s %s, added by %s)", spec.GetName(), ErrExists,
			Kind(cur.Value), Location(cur.Value), cur.Value.GetBy())
	case !replace:
		return false, fmt.Errorf("registry %s %w (its stored spec does not decode)", spec.GetName(), ErrExists)
	default:
		replaced = true
	}
	if _, err := specs.Update(ctx, key, spec, cur.Revision); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return false, fmt.Errorf("registry %s changed while it was being stored; look at it (sluice get registries) and run again: %w", spec.GetName(), err)
		}
		return false, fmt.Errorf("store registry %s in %s/%s: %w", spec.GetName(), contract.BucketControl, key, err)
	}
	return replaced, nil
}

// Kind is "redis", "directory", "git" or "kubernetes", as RegistryStatus.kind says it.
func Kind(spec *sluicev1.RegistrySpec) string {
	switch spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		return "redis"
	case *sluicev1.RegistrySpec_Directory:
		return "directory"
	case *sluicev1.RegistrySpec_Git:
		return "git"
	case *sluicev1.RegistrySpec_Kubernetes:
		return "kubernetes"
	}
	return "unknown"
}

// Location is where the registry reads: the Redis URL with its key
// prefix when that is not the default, the directory, or the repository
// with its branch and path, or the kubeconfig ("in-cluster") with the
// namespace.
func Location(spec *sluicev1.RegistrySpec) string {
	switch src := spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		if p := src.Redis.GetPrefix(); p != "" && p != registry.DefaultRedisPrefix {
			return src.Redis.GetUrl() + " prefix " + p
		}
		return src.Redis.GetUrl()
	case *sluicev1.RegistrySpec_Directory:
		return src.Directory.GetPath()
	case *sluicev1.RegistrySpec_Git:
		return registry.GitLocation(cmp.Or(src.Git.GetUrl(), src.Git.GetDir()), src.Git.GetBranch(), src.Git.GetPath())
	case *sluicev1.RegistrySpec_Kubernetes:
		return registry.KubeLocation(src.Kubernetes)
	}
	return "-"
}
