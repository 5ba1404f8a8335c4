package store_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func newPresence() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }

// keysOf is what a List answer says, one "key=value" (or "key!" for a
// value that does not decode) per entry, in order.
func keysOf(es []store.Entry[*sluicev1.NodePresence]) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		if e.Err != nil {
			out = append(out, e.Key+"!")
			continue
		}
		out = append(out, e.Key+"="+e.Value.GetAgentVersion())
	}
	return out
}

// TestView_AnswersAsAListingWould: every answer of a View is what a
// listing of the bucket made at the same instant should hold — right after a write,
// a delete, garbage, and after the bucket was deleted and made again —
// and the watch, not a listing, gives it once it has caught up; on R1 and
// on a 3-server cluster, where the watch's consumer may sit on a replica.
func TestView_AnswersAsAListingWould(t *testing.T) {
	s := contract.DefaultSettings()
	for _, backend := range []string{"R1", "R3"} {
		t.Run(backend, func(t *testing.T) {
			env := natstest.Start(t, s)
			if backend == "R3" {
				env = natstest.StartCluster(t, 3, s).Env
			}
			testViewAnswersAsAListingWould(t, env)
		})
	}
}

func testViewAnswersAsAListingWould(t *testing.T, env *natstest.Env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	defer func() { cancel(); <-done }()
	nodes := store.New(env.Buckets.Nodes, newPresence)
	slimmed := 0
	v := store.NewView(nodes, func(p *sluicev1.NodePresence) *sluicev1.NodePresence {
		slimmed++ // only the watch's goroutine calls it
		return &sluicev1.NodePresence{AgentVersion: p.GetAgentVersion()}
	})
	go func() { defer close(done); v.Run(ctx) }()

	// model is what the test wrote: the answer a listing made at the same
	// instant must give (on a cluster a listing of this bucket may itself
	// lag behind a write just acknowledged: it has no floor, its values
	// expire).
	model := map[string]string{}
	same := func(step string) {
		t.Helper()
		got, err := v.List(ctx)
		if err != nil {
			t.Fatalf("%s: view: %v", step, err)
		}
		var want []string
		for _, k := range slices.Sorted(maps.Keys(model)) {
			want = append(want, k+model[k])
		}
		if g := keysOf(got); !slices.Equal(g, want) {
			t.Fatalf("%s: the view answers %v, want %v", step, g, want)
		}
	}
	same("an empty bucket")
	for i := range 20 {
		key := fmt.Sprintf("node-%02d", i)
		if _, err := nodes.Create(ctx, key, &sluicev1.NodePresence{Node: key, AgentVersion: "v1"}); err != nil {
			t.Fatal(err)
		}
		model[key] = "=v1"
		same("after creating " + key) // at once: read-your-writes
	}
	rev, err := nodes.Get(ctx, "node-03")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Update(ctx, "node-03", &sluicev1.NodePresence{Node: "node-03", AgentVersion: "v2"}, rev.Revision); err != nil {
		t.Fatal(err)
	}
	model["node-03"] = "=v2"
	same("after an update")
	if err := nodes.Delete(ctx, "node-05", 0); err != nil {
		t.Fatal(err)
	}
	delete(model, "node-05")
	same("after a delete")
	if _, err := env.Buckets.Nodes.Put(ctx, "node-07", []byte("{garbage")); err != nil {
		t.Fatal(err)
	}
	model["node-07"] = "!"
	same("after garbage")
	viewed, listed := v.Answers()
	if viewed < 20 {
		t.Fatalf("the watch answered %d of %d lists (%d listed the bucket): want it to answer every one after the first writes", viewed, viewed+listed, listed)
	}

	// The bucket deleted and made again (a store wiped under a running
	// configurator): nothing of the old stream may be answered.
	if err := env.JS.DeleteKeyValue(ctx, contract.BucketNodes); err != nil {
		t.Fatal(err)
	}
	if err := buckets.Ensure(ctx, env.JS, env.Settings); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Create(ctx, "node-new", &sluicev1.NodePresence{Node: "node-new", AgentVersion: "v3"}); err != nil {
		t.Fatal(err)
	}
	model = map[string]string{"node-new": "=v3"}
	same("after the bucket was made again")
	natstest.Eventually(t, 30*time.Second, "the watch follows the new bucket", func() bool {
		before, _ := v.Answers()
		same("while the watch follows the new bucket")
		after, _ := v.Answers()
		return after > before
	})
	if slimmed == 0 {
		t.Fatal("slim was never called")
	}
}
