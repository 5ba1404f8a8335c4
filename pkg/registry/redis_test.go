package registry_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// set sets keys on c, failing the test on an error.
func set(t *testing.T, c *redis.Client, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := c.Set(context.Background(), kv[i], kv[i+1], 0).Err(); err != nil {
			t.Fatalf("set %s: %v", kv[i], err)
		}
	}
}

func TestRedis_Fetch_OneDocumentPerKey(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	tests := []struct {
		name    string
		key     string
		value   string
		want    []string // intent IDs
		wantErr []string // each must appear in the document's error
	}{
		{name: "yaml intent", key: "sluice:intents:layer2network.tenant-a", value: tenantAYAML, want: []string{"layer2network/tenant-a"}},
		{name: "json intent", key: "sluice:intents:routingtable.t100", value: t100JSON, want: []string{"routingtable/t100"}},
		{name: "intent under another intent's key", key: "sluice:intents:layer2network.tenant-x", value: tenantBYAML,
			wantErr: []string{"key sluice:intents:layer2network.tenant-x holds the intent layer2network/tenant-b", "sluice:intents:layer2network.tenant-b"}},
		{name: "kind token not lower case", key: "sluice:intents:Layer2Network.tenant-a", value: tenantAYAML,
			wantErr: []string{"key sluice:intents:Layer2Network.tenant-a", "whose key is sluice:intents:layer2network.tenant-a"}},
		{name: "malformed document", key: "sluice:intents:layer2network.broken", value: brokenYAML,
			wantErr: []string{"sluice:intents:layer2network.broken: document 1"}},
		{name: "two intents in one key", key: "sluice:intents:layer2network.two", value: tenantAYAML + "---\n" + tenantBYAML,
			wantErr: []string{"key sluice:intents:layer2network.two holds 2 intents"}},
		{name: "empty value", key: "sluice:intents:layer2network.empty", value: "",
			wantErr: []string{"key sluice:intents:layer2network.empty holds no intent"}},
	}
	for _, tt := range tests {
		set(t, c, tt.key, tt.value)
	}
	ctx := context.Background()
	if err := c.HSet(ctx, "sluice:intents:layer2network.hash", "spec", "x").Err(); err != nil {
		t.Fatal(err)
	}
	set(t, c, "other:layer2network.tenant-a", tenantAYAML, "sluice:intent", tenantAYAML)

	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	snap := fetch(t, r)

	var wantOrigins []string
	for _, tt := range tests {
		wantOrigins = append(wantOrigins, tt.key)
	}
	wantOrigins = append(wantOrigins, "sluice:intents:layer2network.hash")
	slices.Sort(wantOrigins)
	if got := origins(snap); !slices.Equal(got, wantOrigins) {
		t.Fatalf("origins = %q, want the keys under the prefix, sorted: %q", got, wantOrigins)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := document(t, snap, tt.key)
			if got := ids(d); !slices.Equal(got, tt.want) {
				t.Errorf("intents = %q, want %q", got, tt.want)
			}
			if len(tt.wantErr) == 0 {
				if d.Err != nil {
					t.Errorf("err = %v, want none", d.Err)
				}
				return
			}
			if d.Err == nil {
				t.Fatalf("err = nil, want one with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(d.Err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", d.Err, w)
				}
			}
		})
	}
	t.Run("value that is not a string", func(t *testing.T) {
		d := document(t, snap, "sluice:intents:layer2network.hash")
		if d.Err == nil || !strings.Contains(d.Err.Error(), "key sluice:intents:layer2network.hash holds a hash, not a string") {
			t.Errorf("err = %v, want the key and its type named", d.Err)
		}
	})
}

func TestRedis_Fetch_PrefixWithGlobCharactersMatchesOnlyItself(t *testing.T) {
	s := redistest.Start(t)
	// Unescaped, the pattern t[1]*:* would match t1x:... too.
	set(t, s.Client(), "t[1]*:layer2network.tenant-a", tenantAYAML, "t1x:layer2network.tenant-b", tenantBYAML)

	snap := fetch(t, open(t, &sluicev1.RedisRegistry{Url: s.URL(), Prefix: "t[1]*:"}))

	if got, want := origins(snap), []string{"t[1]*:layer2network.tenant-a"}; !slices.Equal(got, want) {
		t.Fatalf("origins = %q, want %q", got, want)
	}
	if d := snap.Documents[0]; d.Err != nil {
		t.Errorf("err = %v, want none", d.Err)
	}
}

func TestRedis_Fetch_ReadsEveryKeyOfALargeRegistry(t *testing.T) {
	s := redistest.Start(t)
	const n = 2345 // several SCAN pages and MGET batches
	pipe := s.Client().Pipeline()
	for i := range n {
		name := fmt.Sprintf("t%d", i)
		pipe.Set(context.Background(), "sluice:intents:routingtable."+name,
			fmt.Sprintf(`{"kind": "RoutingTable", "name": %q, "spec": {"tableId": %d}}`, name, i+1), 0)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}

	snap := fetch(t, open(t, &sluicev1.RedisRegistry{Url: s.URL()}))

	if len(snap.Documents) != n {
		t.Fatalf("%d documents, want %d", len(snap.Documents), n)
	}
	if !slices.IsSortedFunc(snap.Documents, func(a, b registry.Document) int { return strings.Compare(a.Origin, b.Origin) }) {
		t.Error("documents are not sorted by origin")
	}
	for _, d := range snap.Documents {
		if d.Err != nil || len(d.Intents) != 1 {
			t.Fatalf("%s: %d intents, err %v; want one intent", d.Origin, len(d.Intents), d.Err)
		}
	}
}

func TestRedis_Version_ChangesWithContentOnly(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	set(t, c, "sluice:intents:layer2network.tenant-a", tenantAYAML)

	v1 := fetch(t, r).Version
	if v := fetch(t, r).Version; v != v1 {
		t.Errorf("version changed without a change: %s, then %s", v1, v)
	}
	set(t, c, "sluice:intents:layer2network.tenant-a", tenantAYAML)
	if v := fetch(t, r).Version; v != v1 {
		t.Errorf("version changed when a key was set to its value: %s, then %s", v1, v)
	}
	set(t, c, "other:x", "y")
	if v := fetch(t, r).Version; v != v1 {
		t.Errorf("version changed with a key outside the prefix: %s, then %s", v1, v)
	}
	set(t, c, "sluice:intents:layer2network.tenant-a", strings.Replace(tenantAYAML, "100", "101", 1))
	v2 := fetch(t, r).Version
	if v2 == v1 {
		t.Error("version did not change when a value changed")
	}
	set(t, c, "sluice:intents:layer2network.tenant-b", tenantBYAML)
	v3 := fetch(t, r).Version
	if v3 == v2 {
		t.Error("version did not change when a key was added")
	}
	if err := c.Del(context.Background(), "sluice:intents:layer2network.tenant-b").Err(); err != nil {
		t.Fatal(err)
	}
	if v := fetch(t, r).Version; v != v2 {
		t.Errorf("version after deleting the added key = %s, want the version before it, %s", v, v2)
	}
}

func TestRedis_ServerStopped_FetchFails_ThenWorksAfterRestart(t *testing.T) {
	s := redistest.Start(t)
	set(t, s.Client(), "sluice:intents:layer2network.tenant-a", tenantAYAML)
	// Saved, so the restarted server loads it (the server saves nothing by itself).
	if err := s.Client().Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	before := fetch(t, r)

	s.Stop()
	snap, err := r.Fetch(context.Background())
	if err == nil {
		t.Fatalf("fetch from a stopped server answered %d documents, want an error", len(snap.Documents))
	}
	if len(snap.Documents) != 0 || snap.Version != "" {
		t.Errorf("fetch error came with a snapshot: %+v", snap)
	}
	if !strings.Contains(err.Error(), s.URL()) {
		t.Errorf("err = %q, want it to name %s", err, s.URL())
	}

	s.Restart()
	after := fetch(t, r)
	if after.Version != before.Version || !slices.Equal(origins(after), []string{"sluice:intents:layer2network.tenant-a"}) {
		t.Errorf("after restart: origins %q, version %s; want what was saved, version %s", origins(after), after.Version, before.Version)
	}
}

func TestRedis_Fetch_BoundedByContext(t *testing.T) {
	s := redistest.Start(t)
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Fetch(ctx); err == nil {
		t.Fatal("fetch with a cancelled context succeeded, want an error")
	}
}

// subscribed waits until the registry's watch has subscribed to keyspace
// notifications.
func subscribed(t *testing.T, c *redis.Client) {
	t.Helper()
	eventually(t, "keyspace subscription", func() bool {
		n, err := c.Do(context.Background(), "PUBSUB", "NUMPAT").Int()
		return err == nil && n > 0
	})
}

func TestRedis_Changed_FiresOnSetAndDelWhenNotificationsAreOn(t *testing.T) {
	s := redistest.Start(t, redistest.WithNotifyKeyspaceEvents("KEA"))
	// Database 2, so the subscription must name the URL's database.
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DB: 2})
	t.Cleanup(func() { _ = c.Close() })
	r := open(t, &sluicev1.RedisRegistry{Url: "redis://" + s.Addr() + "/2"})
	changed := r.Changed()
	subscribed(t, c)

	set(t, c, "sluice:intents:layer2network.tenant-a", tenantAYAML)
	waitNudge(t, changed, "SET")
	settle(changed)
	if err := c.Del(context.Background(), "sluice:intents:layer2network.tenant-a").Err(); err != nil {
		t.Fatal(err)
	}
	waitNudge(t, changed, "DEL")
	if n := r.Note(); n != "" {
		t.Errorf("note = %q, want none with notifications on", n)
	}

	settle(changed)
	set(t, c, "other:layer2network.tenant-a", tenantAYAML)
	// 500ms: a notification reaches the watch within milliseconds of the
	// SET (the nudges above did); a slower one can only go unseen, never
	// fail the test wrongly.
	select {
	case <-changed:
		t.Error("a key outside the prefix announced a change")
	case <-time.After(500 * time.Millisecond):
	}
}

func TestRedis_Changed_AnnouncesAfterReconnect(t *testing.T) {
	s := redistest.Start(t, redistest.WithNotifyKeyspaceEvents("KEA"))
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	changed := r.Changed()
	subscribed(t, s.Client())
	settle(changed)

	s.Stop()
	eventually(t, "note while the server is down", func() bool { return strings.Contains(r.Note(), "change notifications are not received") })
	s.Restart()
	// What changed while the server was away was announced to no one:
	// the watch announces a change when it is back.
	waitNudge(t, changed, "restart")
	fetch(t, r) // the sync the nudge asks for works at once
	eventually(t, "note cleared after restart", func() bool { return r.Note() == "" })
	set(t, s.Client(), "sluice:intents:layer2network.tenant-a", tenantAYAML)
	waitNudge(t, changed, "SET after restart")
}

func TestRedis_Note_SaysWhenKeyspaceNotificationsAreOff(t *testing.T) {
	s := redistest.Start(t) // the server default: no notifications
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	if n := r.Note(); n != "" {
		t.Errorf("note before the watch started = %q, want none", n)
	}
	r.Changed()
	eventually(t, "note", func() bool { return r.Note() != "" })
	if n, want := r.Note(), `keyspace notifications are off on the server (notify-keyspace-events=""): changes are seen at the next sync interval`; !strings.HasPrefix(n, want) {
		t.Errorf("note = %q, want it to begin %q", n, want)
	}
}

// Notifications turned on while the watch runs (CONFIG SET, no restart):
// the note clears at the first notification, not after a silence of
// redisIdlePing (30s), which a registry written to more often never has.
func TestRedis_Note_ClearsOnceNotificationsAreTurnedOn(t *testing.T) {
	s := redistest.Start(t) // the server default: no notifications
	c := s.Client()
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	changed := r.Changed()
	eventually(t, "note", func() bool { return strings.Contains(r.Note(), "keyspace notifications are off") })
	if err := c.ConfigSet(context.Background(), "notify-keyspace-events", "KEA").Err(); err != nil {
		t.Fatal(err)
	}
	settle(changed)
	// A write every 200ms: never 30s of silence. 10s is many notifications
	// and a third of redisIdlePing.
	deadline := time.Now().Add(10 * time.Second)
	for try := 0; r.Note() != ""; try++ {
		if time.Now().After(deadline) {
			t.Fatalf("note %q still there 10s after notifications were turned on, with %d writes since", r.Note(), try)
		}
		set(t, c, "sluice:intents:layer2network.tenant-a", fmt.Sprintf("%s# try %d\n", tenantAYAML, try))
		time.Sleep(200 * time.Millisecond)
	}
}

func TestRedis_PasswordFile(t *testing.T) {
	s := redistest.Start(t, redistest.WithPassword("s3cret"))
	set(t, s.Client(), "sluice:intents:layer2network.tenant-a", tenantAYAML)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("right password, with the newline echo writes", func(t *testing.T) {
		r := open(t, &sluicev1.RedisRegistry{Url: s.URL(), PasswordFile: write("right", "s3cret\n")})
		if got := origins(fetch(t, r)); !slices.Equal(got, []string{"sluice:intents:layer2network.tenant-a"}) {
			t.Errorf("origins = %q", got)
		}
	})
	t.Run("password read at each connect", func(t *testing.T) {
		file := write("rotated", "wrong")
		r := open(t, &sluicev1.RedisRegistry{Url: s.URL(), PasswordFile: file})
		if _, err := r.Fetch(context.Background()); err == nil {
			t.Fatal("fetch with a wrong password succeeded")
		}
		write("rotated", "s3cret")
		eventually(t, "fetch with the rotated password", func() bool {
			_, err := r.Fetch(context.Background())
			return err == nil
		})
	})
	tests := []struct {
		name    string
		file    string
		wantErr string
	}{
		{name: "wrong password", file: write("wrong", "nope"), wantErr: "WRONGPASS"},
		{name: "no password file", file: filepath.Join(dir, "missing"), wantErr: "read redis.password_file: open " + filepath.Join(dir, "missing")},
		{name: "empty password file", file: write("empty", "\n"), wantErr: "redis.password_file " + filepath.Join(dir, "empty") + " is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := open(t, &sluicev1.RedisRegistry{Url: s.URL(), PasswordFile: tt.file})
			_, err := r.Fetch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
	t.Run("no password", func(t *testing.T) {
		r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
		if _, err := r.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("err = %v, want NOAUTH", err)
		}
	})
}

func TestCheck_Redis(t *testing.T) {
	tests := []struct {
		name    string
		given   *sluicev1.RedisRegistry
		wantErr []string // each must appear in the error; none: valid
	}{
		{name: "url only", given: &sluicev1.RedisRegistry{Url: "redis://redis.example:6379/0"}},
		{name: "user without password", given: &sluicev1.RedisRegistry{Url: "redis://sluice@redis.example:6379/1", PasswordFile: "/run/secrets/redis"}},
		{name: "tls with a ca file", given: &sluicev1.RedisRegistry{Url: "rediss://redis.example:6380/0", CaFile: "/etc/ssl/redis-ca.pem"}},
		{name: "no url", given: &sluicev1.RedisRegistry{}, wantErr: []string{"redis.url: required"}},
		{name: "password in the url", given: &sluicev1.RedisRegistry{Url: "redis://sluice:hunter2@redis.example:6379/0"},
			wantErr: []string{"redis.url", "password", "redis.password_file"}},
		{name: "password without user in the url", given: &sluicev1.RedisRegistry{Url: "redis://:hunter2@redis.example:6379/0"},
			wantErr: []string{"redis.url", "redis.password_file"}},
		{name: "unix socket", given: &sluicev1.RedisRegistry{Url: "unix:///run/redis.sock"}, wantErr: []string{"redis.url", "redis:// or rediss://"}},
		{name: "not a database number", given: &sluicev1.RedisRegistry{Url: "redis://redis.example/zero"}, wantErr: []string{"redis.url", "database number"}},
		{name: "relative password file", given: &sluicev1.RedisRegistry{Url: "redis://redis.example", PasswordFile: "secret"},
			wantErr: []string{"redis.password_file", "not an absolute path"}},
		{name: "ca file without tls", given: &sluicev1.RedisRegistry{Url: "redis://redis.example", CaFile: "/etc/ssl/ca.pem"},
			wantErr: []string{"redis.ca_file", "rediss://"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.Check(&sluicev1.RegistrySpec{Name: "cache", Source: &sluicev1.RegistrySpec_Redis{Redis: tt.given}})
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Errorf("err = %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("err = nil, want one with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("err = %q shows the password", err)
			}
		})
	}
}

func TestRedis_KindAndLocation(t *testing.T) {
	r := open(t, &sluicev1.RedisRegistry{Url: "redis://sluice@redis.example:6379/2", PasswordFile: "/run/secrets/redis"})
	if r.Kind() != "redis" || r.Location() != "redis://sluice@redis.example:6379/2" {
		t.Errorf("kind %q, location %q", r.Kind(), r.Location())
	}
	if err := r.Close(); err != nil {
		t.Errorf("first close: %v", err)
	}
}

// A value over MaxKeyBytes is not read: its document is an error naming the
// key, its size and the limit, and the other keys read as usual. A size
// change changes the version.
func TestRedis_Fetch_ValueOverTheLimitIsNotRead(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	big := "sluice:intents:layer2network.tenant-b"
	set(t, c, "sluice:intents:layer2network.tenant-a", tenantAYAML, big, tenantBYAML+"#"+strings.Repeat("x", registry.MaxKeyBytes))
	r := open(t, &sluicev1.RedisRegistry{Url: s.URL()})
	snap := fetch(t, r)
	if got := ids(document(t, snap, "sluice:intents:layer2network.tenant-a")); !slices.Equal(got, []string{"layer2network/tenant-a"}) {
		t.Errorf("the key under the limit: intents %q", got)
	}
	d := document(t, snap, big)
	size := len(tenantBYAML) + 1 + registry.MaxKeyBytes
	want := fmt.Sprintf("key %s holds %d bytes, over the limit of %d bytes (1 MiB) for one intent; it was not read", big, size, registry.MaxKeyBytes)
	if d.Err == nil || d.Err.Error() != want || len(d.Intents) != 0 {
		t.Fatalf("the key over the limit: err %v, intents %q; want %q and none", d.Err, ids(d), want)
	}
	set(t, c, big, tenantBYAML+"#"+strings.Repeat("x", registry.MaxKeyBytes+1))
	if again := fetch(t, r); again.Version == snap.Version {
		t.Error("the version did not change when the value over the limit grew")
	}
	set(t, c, big, tenantBYAML)
	if got := ids(document(t, fetch(t, r), big)); !slices.Equal(got, []string{"layer2network/tenant-b"}) {
		t.Errorf("the key back under the limit: intents %q, want it read", got)
	}
}

// Values near the limit are read in MGETs of at most 16 MiB: twenty keys of
// almost 1 MiB each all read, once each, in key order.
func TestRedis_Fetch_LargeValuesAreReadInBoundedBatches(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	var want []string
	for i := range 20 {
		name := fmt.Sprintf("tenant-%02d", i)
		doc := fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d}\n#", name, 100+i, 10100+i)
		set(t, c, "sluice:intents:layer2network."+name, doc+strings.Repeat("x", registry.MaxKeyBytes-len(doc)))
		want = append(want, "sluice:intents:layer2network."+name)
	}
	snap := fetch(t, open(t, &sluicev1.RedisRegistry{Url: s.URL()}))
	if got := origins(snap); !slices.Equal(got, want) {
		t.Fatalf("origins = %q, want %q", got, want)
	}
	for _, d := range snap.Documents {
		if d.Err != nil || len(d.Intents) != 1 {
			t.Errorf("%s: err %v, %d intents; want one intent", d.Origin, d.Err, len(d.Intents))
		}
	}
}
