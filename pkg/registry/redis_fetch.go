package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/intent"
)

// Fetch reads every key under the prefix. Any failure to list or read is
// an error: a partial listing is never answered.
func (r *redisRegistry) Fetch(ctx context.Context) (Snapshot, error) {
	c := r.newClient()
	defer c.Close()
	keys, err := r.scan(ctx, c)
	if err != nil {
		return Snapshot{}, fmt.Errorf("list keys %s* at %s: %w", r.prefix, r.location, err)
	}
	entries, err := r.read(ctx, c, keys)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read keys %s* at %s: %w", r.prefix, r.location, err)
	}
	snap := Snapshot{Documents: make([]Document, 0, len(entries))}
	d := newDigest()
	for _, e := range entries { // in key order
		if e.tooLarge > 0 {
			d.add(e.key, "too-large", strconv.FormatInt(e.tooLarge, 10))
			snap.Documents = append(snap.Documents, Document{Origin: e.key,
				Err: fmt.Errorf("key %s holds %d bytes, over the limit of %d bytes (1 MiB) for one intent; it was not read", e.key, e.tooLarge, MaxKeyBytes)})
			continue
		}
		d.add(e.key, e.typ, e.value)
		if e.typ != "string" {
			snap.Documents = append(snap.Documents, Document{Origin: e.key,
				Err: fmt.Errorf("key %s holds a %s, not a string: set it to one intent as a YAML or JSON document", e.key, e.typ)})
			continue
		}
		snap.Documents = append(snap.Documents, r.document(e.key, e.value))
	}
	snap.Version = d.String()
	return snap, nil
}

// scan lists the keys under the prefix, sorted, each once (SCAN may
// return a key twice).
func (r *redisRegistry) scan(ctx context.Context, c *redis.Client) ([]string, error) {
	match := escapeGlob(r.prefix) + "*"
	var keys []string
	var cursor uint64
	for {
		batch, next, err := c.Scan(ctx, cursor, match, redisScanCount).Result()
		if err != nil {
			return nil, err
		}
		keys = append(keys, batch...)
		if next == 0 {
			break
		}
		cursor = next
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// MaxKeyBytes bounds the value of one Redis registry key (one intent):
// a longer value is not read, and its document is an error naming the key
// and its size. docs/registries.md documents it.
const MaxKeyBytes = 1 << 20

// entry is one key as read: its type and, for a string, its value — or,
// for a string over MaxKeyBytes, its size (value not read).
type entry struct {
	key, typ, value string
	tooLarge        int64
}

// read reads keys, in their order. One pipeline asks every key's TYPE and
// STRLEN; then only the strings within MaxKeyBytes are read, by MGETs of at
// most redisMGetBatch keys and redisMGetBytes. A key gone since SCAN is
// left out; a key that is not a string is an entry of its type; a string
// over MaxKeyBytes is an entry of its size, never read.
func (r *redisRegistry) read(ctx context.Context, c *redis.Client, keys []string) ([]entry, error) {
	out := make([]entry, 0, len(keys))
	for batch := range slices.Chunk(keys, redisMGetBatch) {
		types, sizes, err := r.describe(ctx, c, batch)
		if err != nil {
			return nil, err
		}
		var small []string
		var bytes int64
		for i, key := range batch {
			switch {
			case types[i] == "none": // deleted since SCAN
			case types[i] != "string":
				out = append(out, entry{key: key, typ: types[i]})
			case sizes[i] > MaxKeyBytes:
				out = append(out, entry{key: key, typ: "string", tooLarge: sizes[i]})
			default:
				if len(small) > 0 && bytes+sizes[i] > redisMGetBytes {
					if out, err = mget(ctx, c, small, out); err != nil {
						return nil, err
					}
					small, bytes = nil, 0
				}
				small, bytes = append(small, key), bytes+sizes[i]
			}
		}
		if out, err = mget(ctx, c, small, out); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// describe returns the TYPE and STRLEN of each key, in one round trip
// (STRLEN is 0 for a key that is not a string).
func (r *redisRegistry) describe(ctx context.Context, c *redis.Client, keys []string) (types []string, sizes []int64, err error) {
	typeCmds := make([]*redis.StatusCmd, len(keys))
	lenCmds := make([]*redis.IntCmd, len(keys))
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			typeCmds[i], lenCmds[i] = p.Type(ctx, k), p.StrLen(ctx, k)
		}
		return nil
	})
	if err != nil && !isWrongType(err) {
		return nil, nil, fmt.Errorf("type and strlen: %w", err)
	}
	types, sizes = make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		if err := typeCmds[i].Err(); err != nil {
			return nil, nil, fmt.Errorf("type %s: %w", k, err)
		}
		if err := lenCmds[i].Err(); err != nil && !isWrongType(err) {
			return nil, nil, fmt.Errorf("strlen %s: %w", k, err)
		}
		types[i], sizes[i] = typeCmds[i].Val(), lenCmds[i].Val()
	}
	return types, sizes, nil
}

// isWrongType says whether err is Redis's answer to a command on a key of
// another type (STRLEN of a hash).
func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

// mget reads the string keys batch with one MGET and appends their entries
// to out; a key deleted (or no longer a string) since describe is left out,
// for the next sync to see.
func mget(ctx context.Context, c *redis.Client, batch []string, out []entry) ([]entry, error) {
	if len(batch) == 0 {
		return out, nil
	}
	vals, err := c.MGet(ctx, batch...).Result()
	if err != nil {
		return nil, fmt.Errorf("mget: %w", err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out = append(out, entry{key: batch[i], typ: "string", value: s})
		}
	}
	return out, nil
}

// document parses the value of key, which must be the one intent the key
// names.
func (r *redisRegistry) document(key, value string) Document {
	ins, parseErr := intent.Parse(key, []byte(value))
	want := strings.TrimPrefix(key, r.prefix)
	var keyErr error
	switch {
	case len(ins) == 0 && parseErr == nil:
		keyErr = fmt.Errorf("key %s holds no intent: set it to the intent %s as a YAML or JSON document", key, want)
	case len(ins) > 1:
		keyErr = fmt.Errorf("key %s holds %d intents: a key holds exactly one, under %s<kind>.<name>", key, len(ins), r.prefix)
		ins = nil
	case len(ins) == 1 && intent.Key(ins[0]) != want:
		keyErr = fmt.Errorf("key %s holds the intent %s, whose key is %s%s: move it there", key, intent.ID(ins[0]), r.prefix, intent.Key(ins[0]))
		ins = nil
	}
	return Document{Origin: key, Intents: ins, Err: errors.Join(parseErr, keyErr)}
}
