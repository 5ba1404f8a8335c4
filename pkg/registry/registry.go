// Package registry reads intents from the registries the configurator syncs
// besides its own API: a Redis server (redis.go), a directory (dir.go), a
// branch of a Git repository (git.go) and custom resources on a Kubernetes
// API server (kube.go).
// A Registry reads (the Kubernetes registry also writes each resource's
// status back after a sync: Reporter, kube_status.go); what a sync does
// with the answer (merge in place, mark what disappeared, hold mass
// deletions, report conflicts) is the configurator's.
//
// Every answer is whole or an error: a registry never answers part of its
// content as if it were all of it, so the configurator can treat an
// error as "nothing is known" and change nothing.
package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Defaults of a RegistrySpec's unset fields.
const (
	DefaultSyncInterval = 30 * time.Second
	DefaultHoldShare    = 0.5
	DefaultRedisPrefix  = "sluice:intents:"
)

// Document is one place in a registry that declares intents: a Redis key,
// a file or a custom resource.
type Document struct {
	// Origin names the document within its registry: the Redis key, the
	// file's path relative to the registry's directory, or a custom
	// resource's kind/name (kind/namespace/name when namespaced).
	Origin string
	// Intents parsed from it (with Err set, those that parsed).
	Intents []*sluicev1.Intent
	// Err says why the document, or part of it, could not be read or
	// parsed (an intent.ParseError, a key whose name does not match the
	// intent it holds, ...). The configurator keeps the last valid version
	// of every intent it had from this origin.
	Err error
}

// Snapshot is a registry's whole content at one moment.
type Snapshot struct {
	Documents []Document // sorted by Origin
	// Version is a digest of the content: equal versions, equal content.
	Version string
	// Commit is the commit a git registry's answer was read at; nil for
	// other kinds.
	Commit *sluicev1.GitCommit
}

// Registry is one source of intents.
type Registry interface {
	// Kind is "redis", "directory", "git" or "kubernetes".
	Kind() string
	// Location is where it reads, without credentials: a URL or a path.
	Location() string
	// Fetch reads the whole content. Any failure (unreachable, timeout, a
	// listing that could not finish) is an error and no snapshot; an
	// answer that must not be merged without an operator is an error
	// wrapping ErrHeld.
	Fetch(ctx context.Context) (Snapshot, error)
	// Changed receives when the registry announced a change (Redis
	// keyspace notifications, file system events). It is a hint that
	// makes a sync come sooner; the configurator also syncs every sync
	// interval. Never closed; may never receive.
	Changed() <-chan struct{}
	// Note is something an operator should know about how it is read, for
	// example "keyspace notifications are off on the server: polling
	// only"; "" when nothing.
	Note() string
	// Close releases connections and watches.
	Close() error
}

// Options are the opener's: what a registry keeps on the configurator's
// host.
type Options struct {
	// GitCache is the directory under which a git registry of a server
	// keeps its bare clone, one directory per registry; "" keeps it in
	// memory (cloned anew by each Open).
	GitCache string
}

// Open returns the registry spec describes. It checks the spec (every
// problem named with its field) and connects lazily: an unreachable
// server is an error from Fetch, not from Open.
func Open(spec *sluicev1.RegistrySpec, opts Options, log zerolog.Logger) (Registry, error) {
	if err := Check(spec); err != nil {
		return nil, err
	}
	switch src := spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		return openRedis(src.Redis, log)
	case *sluicev1.RegistrySpec_Directory:
		return openDir(src.Directory, log)
	case *sluicev1.RegistrySpec_Git:
		return openGit(spec.GetName(), src.Git, opts, log)
	case *sluicev1.RegistrySpec_Kubernetes:
		return openKube(src.Kubernetes, log)
	}
	return nil, errors.New("source: the spec names none of redis, directory, git and kubernetes")
}

// Check reports the first problem of spec, naming the field.
func Check(spec *sluicev1.RegistrySpec) error {
	if err := contract.ValidRegistryName(spec.GetName()); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if s := spec.GetHoldShare(); s < 0 || s > 1 {
		return fmt.Errorf("hold_share: %v is not a share between 0 and 1", s)
	}
	if d := spec.GetSyncInterval(); d != nil && (d.AsDuration() < time.Second || d.AsDuration() > 24*time.Hour) {
		return fmt.Errorf("sync_interval: %s is outside 1s to 24h", d.AsDuration())
	}
	switch src := spec.GetSource().(type) {
	case *sluicev1.RegistrySpec_Redis:
		return checkRedis(src.Redis)
	case *sluicev1.RegistrySpec_Directory:
		return checkDir(src.Directory)
	case *sluicev1.RegistrySpec_Git:
		return checkGit(src.Git)
	case *sluicev1.RegistrySpec_Kubernetes:
		return checkKube(src.Kubernetes)
	}
	return errors.New("source: give redis, directory, git or kubernetes")
}

// SyncInterval is spec's sync interval with its default.
func SyncInterval(spec *sluicev1.RegistrySpec) time.Duration {
	if d := spec.GetSyncInterval().AsDuration(); d > 0 {
		return d
	}
	return DefaultSyncInterval
}

// HoldShare is spec's hold share with its default.
func HoldShare(spec *sluicev1.RegistrySpec) float64 {
	if s := spec.GetHoldShare(); s > 0 {
		return s
	}
	return DefaultHoldShare
}
