package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Where the scenario's registry keeps its intents, and the few operations
// the registry faults do on it: one file per intent in a directory, or one
// key per intent on a redis-server the harness starts (Scenario.Registry's
// Redis, on real time). Each operation is atomic, as an answer sees it: a
// rename, a SET or a DEL.
type regStore interface {
	fmt.Stringer // where it is, for the schedule
	// kind is the registry kind, as the schedule names it.
	kind() string
	// fill declares intents 0 … n-1, before the registry is declared.
	fill(n int) error
	// source sets the registry spec's source to this store, as `sluice
	// registry add --dir DIR --poll` or `--redis URL` does.
	source(spec *sluicev1.RegistrySpec)
	// drop takes intent i out of the registry's answers; back puts it in
	// again.
	drop(i int) error
	back(i int) error
	// vanish makes the whole registry unreachable, keeping the intents
	// aside (the directory moved away, the server stopped); reappear
	// brings it back empty, to be filled again with back (a checkout
	// made again, a Redis restarted without its data).
	vanish() error
	reappear() error
	// list names the intents the registry holds now, by index.
	list() ([]int, error)
}

// dirStore is a directory registry: intent i is the file regFile(i);
// dropped files wait in away (away.dir once the directory itself left).
type dirStore struct {
	dir, away string
	parked    string // where dropped files wait now: away, or away.dir after vanish
	poll      bool   // on virtual time: inotify waits on the kernel, which the bubble cannot see
}

func newDirStore(root string, poll bool) *dirStore {
	away := filepath.Join(root, "away")
	return &dirStore{dir: filepath.Join(root, "intents"), away: away, parked: away, poll: poll}
}

func (d *dirStore) kind() string   { return "directory" }
func (d *dirStore) String() string { return "directory " + d.dir }

func (d *dirStore) fill(n int) error {
	for _, dir := range []string{d.dir, d.away} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("registry directory: %w", err)
		}
	}
	for i := range n {
		if err := writeFile(d.dir, regFile(i), regDoc(i)); err != nil {
			return fmt.Errorf("registry file: %w", err)
		}
	}
	return nil
}

func (d *dirStore) source(spec *sluicev1.RegistrySpec) {
	spec.Source = &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: d.dir, Poll: d.poll}}
}

func (d *dirStore) move(from, to string, i int) error {
	if err := os.Rename(filepath.Join(from, regFile(i)), filepath.Join(to, regFile(i))); err != nil {
		return fmt.Errorf("move %s: %w", regFile(i), err)
	}
	return nil
}

func (d *dirStore) drop(i int) error { return d.move(d.dir, d.parked, i) }
func (d *dirStore) back(i int) error { return d.move(d.parked, d.dir, i) }

func (d *dirStore) vanish() error {
	if err := os.Rename(d.dir, d.away+".dir"); err != nil {
		return fmt.Errorf("move the directory away: %w", err)
	}
	d.parked = d.away + ".dir"
	return nil
}

func (d *dirStore) reappear() error {
	if err := os.Mkdir(d.dir, 0o755); err != nil {
		return fmt.Errorf("make the directory again: %w", err)
	}
	return nil
}

func (d *dirStore) list() ([]int, error) {
	var out []int
	for i := range maxRegIntents {
		switch _, err := os.Stat(filepath.Join(d.dir, regFile(i))); {
		case err == nil:
			out = append(out, i)
		case !os.IsNotExist(err):
			return nil, err
		}
	}
	return out, nil
}

// redisStore is a Redis registry: intent i is the key redisPrefix+regKey(i)
// on a redis-server of the seed's own, started with the keyspace
// notifications the adapter follows (KA, docs/registries.md) and no
// persistence, so that a restart comes back empty.
type redisStore struct {
	srv *redistest.Server
	c   *redis.Client
}

// redisPrefix is the registry's key prefix (the adapter's default).
const redisPrefix = "sluice:intents:"

func newRedisStore(t testing.TB) *redisStore {
	srv := redistest.Start(t, redistest.WithNotifyKeyspaceEvents("KA"))
	return &redisStore{srv: srv, c: srv.Client()}
}

func (r *redisStore) kind() string   { return "redis" }
func (r *redisStore) String() string { return "redis " + r.srv.URL() + " under " + redisPrefix }

func redisKey(i int) string { return redisPrefix + regKey(i) }

func (r *redisStore) fill(n int) error {
	for i := range n {
		if err := r.back(i); err != nil {
			return err
		}
	}
	return nil
}

func (r *redisStore) source(spec *sluicev1.RegistrySpec) {
	spec.Source = &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: r.srv.URL(), Prefix: redisPrefix}}
}

func (r *redisStore) drop(i int) error {
	if err := r.c.Del(context.Background(), redisKey(i)).Err(); err != nil {
		return fmt.Errorf("DEL %s: %w", redisKey(i), err)
	}
	return nil
}

func (r *redisStore) back(i int) error {
	if err := r.c.Set(context.Background(), redisKey(i), regDoc(i), 0).Err(); err != nil {
		return fmt.Errorf("SET %s: %w", redisKey(i), err)
	}
	return nil
}

// vanish stops the server (as a crash would: no data is saved).
func (r *redisStore) vanish() error {
	r.srv.Stop()
	return nil
}

// reappear starts it again on its port, empty.
func (r *redisStore) reappear() error {
	return r.srv.TryRestart() // on a fault's goroutine: no t.Fatal
}

func (r *redisStore) list() ([]int, error) {
	var out []int
	for i := range maxRegIntents {
		n, err := r.c.Exists(context.Background(), redisKey(i)).Result()
		if err != nil {
			return nil, fmt.Errorf("EXISTS %s: %w", redisKey(i), err)
		}
		if n == 1 {
			out = append(out, i)
		}
	}
	return out, nil
}
