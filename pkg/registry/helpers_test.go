package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Intent documents as an operator writes them for sluice apply -f.
const (
	tenantAYAML = "kind: Layer2Network\nname: tenant-a\nspec:\n  vlan: 100\n  vni: 10100\n"
	tenantBYAML = "kind: Layer2Network\nname: tenant-b\nspec: {vlan: 200, vni: 10200}\n"
	t100JSON    = `{"kind": "RoutingTable", "name": "t100", "spec": {"tableId": 100}}`
	brokenYAML  = "kind: Layer2Network\nname: broken\nspec: {vlan: [not a number}\n"
)

// waitFor is how long a test waits for something a goroutine does.
// margin: every wait ends as soon as it happens; a redis-server restart
// and the watch's reconnect backoff (1s doubling) on a loaded machine
// take seconds.
const waitFor = 30 * time.Second

// open opens the registry of source and closes it at cleanup.
func open(t testing.TB, source any) registry.Registry {
	t.Helper()
	spec := &sluicev1.RegistrySpec{Name: "test"}
	switch s := source.(type) {
	case *sluicev1.RedisRegistry:
		spec.Source = &sluicev1.RegistrySpec_Redis{Redis: s}
	case *sluicev1.DirectoryRegistry:
		spec.Source = &sluicev1.RegistrySpec_Directory{Directory: s}
	case *sluicev1.GitRegistry:
		spec.Source = &sluicev1.RegistrySpec_Git{Git: s}
	default:
		t.Fatalf("open: unknown source %T", source)
	}
	r, err := registry.Open(spec, registry.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

// fetch fetches r and fails the test on an error.
func fetch(t *testing.T, r registry.Registry) registry.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	snap, err := r.Fetch(ctx)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	return snap
}

// origins lists the Origin of each document.
func origins(snap registry.Snapshot) []string {
	out := make([]string, len(snap.Documents))
	for i, d := range snap.Documents {
		out[i] = d.Origin
	}
	return out
}

// ids lists intent.ID of each intent of d.
func ids(d registry.Document) []string {
	var out []string
	for _, in := range d.Intents {
		out = append(out, intent.ID(in))
	}
	return out
}

// document returns the document of origin in snap.
func document(t *testing.T, snap registry.Snapshot, origin string) registry.Document {
	t.Helper()
	for _, d := range snap.Documents {
		if d.Origin == origin {
			return d
		}
	}
	t.Fatalf("no document %s among %q", origin, origins(snap))
	return registry.Document{}
}

// waitNudge fails the test unless ch receives within waitFor.
func waitNudge(t *testing.T, ch <-chan struct{}, after string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("no change announced within %s after %s", waitFor, after)
	}
}

// untilNudge does change until ch receives, for changes made before the
// watch goroutine may be watching. Each try must be a change. A try that
// was heard late only adds a try: 300ms is a pace, not a deadline.
func untilNudge(t *testing.T, ch <-chan struct{}, change func(try int)) {
	t.Helper()
	deadline := time.After(waitFor)
	for try := 0; ; try++ {
		change(try)
		select {
		case <-ch:
			return
		case <-time.After(300 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no change announced within %s", waitFor)
		}
	}
}

// settle drains ch until it has been quiet for a while, so the next
// nudge belongs to the next change. 600ms is three times the directory
// watch's debounce (dirDebounce, 200ms); a nudge later than that only makes
// the next waitNudge return early, and the Fetch after it reads the
// change anyway (it reads the source, not the nudge).
func settle(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		case <-time.After(600 * time.Millisecond):
			return
		}
	}
}

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
