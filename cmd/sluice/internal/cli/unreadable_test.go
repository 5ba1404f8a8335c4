package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// putRaw stores b at bucket/key as a broken writer or a hand edit would.
func putRaw(t *testing.T, env *natstest.Env, bucket, key string, b []byte) {
	t.Helper()
	kv, err := env.JS.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// TestGet_UnreadableValue_IsShownAndTheRestListed covers issue 9 item 12:
// one garbage value used to make `get` exit 1 and show nothing. Now the
// key is shown as unreadable, everything else is listed, the exit code is
// 0, and control keys are never listed.
func TestGet_UnreadableValue_IsShownAndTheRestListed(t *testing.T) {
	tests := []struct {
		name     string
		kind     string
		bucket   string
		badKey   string
		badValue string // "" = "garbage{"
		seed     func(t *testing.T, env *natstest.Env)
		wantItem string // a word of the readable item's row
		items    int
	}{
		{
			name: "nodes", kind: "nodes", bucket: contract.BucketStatus, badKey: "node-02", wantItem: "node-01", items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				seed{statuses: []*sluicev1.NodeStatus{{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpX}}}.write(t, env)
			},
		},
		{
			name: "rollouts", kind: "rollouts", bucket: contract.BucketRollouts, badKey: "3-cccccccccccc", wantItem: "2-bbbbbbbbbbbb", items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				seed{rollouts: []*sluicev1.Rollout{{Id: "2-bbbbbbbbbbbb", Revision: revB, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}}}.write(t, env)
			},
		},
		{
			name: "active rollout ref", kind: "rollouts", bucket: contract.BucketRollouts, badKey: contract.KeyActive, wantItem: "2-bbbbbbbbbbbb", items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				seed{rollouts: []*sluicev1.Rollout{{Id: "2-bbbbbbbbbbbb", Revision: revB, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}}}.write(t, env)
			},
		},
		{
			name: "fingerprints", kind: "fingerprints", bucket: contract.BucketFingerprints, badKey: fpOther, wantItem: fpX[:12], items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				seed{fingerprints: []*sluicev1.InvalidFingerprint{{Fingerprint: fpX, Revision: revB, Node: "node-03", Check: "ping", Time: timestamppb.Now()}}}.write(t, env)
			},
		},
		{
			// Valid JSON of another type (a fence) decodes as an empty
			// record: it is unreadable, never listed as a record.
			name: "fingerprints, a value of another type", kind: "fingerprints", bucket: contract.BucketFingerprints, badKey: fpOther,
			badValue: `{"holder":"x","epoch":"5"}`, wantItem: fpX[:12], items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				seed{fingerprints: []*sluicev1.InvalidFingerprint{{Fingerprint: fpX, Revision: revB, Node: "node-03", Check: "ping", Time: timestamppb.Now()}}}.write(t, env)
			},
		},
		{
			name: "revisions", kind: "revisions", bucket: contract.BucketRevisions, badKey: revB, wantItem: revA[:12], items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
				if _, err := revs.Create(context.Background(), revA, &sluicev1.Revision{Id: revA, CreatedAt: timestamppb.Now()}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "revisions head", kind: "revisions", bucket: contract.BucketRevisions, badKey: contract.KeyHead, wantItem: revA[:12], items: 1,
			seed: func(t *testing.T, env *natstest.Env) {
				revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
				if _, err := revs.Create(context.Background(), revA, &sluicev1.Revision{Id: revA, CreatedAt: timestamppb.Now()}); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			tt.seed(t, env)
			bad := cmp.Or(tt.badValue, "garbage{")
			putRaw(t, env, tt.bucket, tt.badKey, []byte(bad))
			putRaw(t, env, tt.bucket, contract.KeyFence, []byte(`{"leaderEpoch": "4"}`))

			code, stdout, stderr := sluice(t, env.URL, "get", tt.kind)
			if code != 0 {
				t.Fatalf("exit code %d, want 0; stderr %s", code, stderr)
			}
			var badRow string
			for _, l := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(l, tt.badKey+" ") {
					badRow = l
				}
			}
			if !strings.Contains(badRow, "<unreadable: "+tt.bucket+"/"+tt.badKey+" value does not decode") {
				t.Errorf("no unreadable row for %s:\n%s", tt.badKey, stdout)
			}
			if !strings.Contains(stdout, tt.wantItem) {
				t.Errorf("readable item %s not listed:\n%s", tt.wantItem, stdout)
			}
			if strings.Contains(stdout, contract.KeyFence) {
				t.Errorf("control key listed:\n%s", stdout)
			}
			if !strings.Contains(stderr, "do not decode") {
				t.Errorf("stderr has no hint: %q", stderr)
			}

			code, stdout, stderr = sluice(t, env.URL, "get", tt.kind, "-o", "json")
			if code != 0 {
				t.Fatalf("-o json: exit code %d, want 0; stderr %s", code, stderr)
			}
			var got view.List
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("-o json: %v\n%s", err, stdout)
			}
			if len(got.Items) != tt.items || len(got.Unreadable) != 1 || got.Unreadable[0].Bucket != tt.bucket || got.Unreadable[0].Key != tt.badKey ||
				!strings.Contains(got.Unreadable[0].Reason, "does not decode") {
				t.Errorf("-o json: %d items, unreadable %+v; want %d items and %s/%s", len(got.Items), got.Unreadable, tt.items, tt.bucket, tt.badKey)
			}
		})
	}
}

// TestRolloutStatus_UnreadableStatus_NodeShownAndExitCodeUnchanged: a
// garbage status of one of the rollout's nodes is a row, not a failure.
func TestRolloutStatus_UnreadableStatus_NodeShownAndExitCodeUnchanged(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Revision: revB, Generation: 5, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Reason: "head moved to generation 5",
		StartedAt: timestamppb.New(time.Now().Add(-time.Minute)), Counts: &sluicev1.RolloutCounts{Total: 3, InProgress: 2, Provisioned: 1},
	}
	seed{
		rollouts: []*sluicev1.Rollout{r},
		desired: []*sluicev1.DesiredConfig{
			{Node: "node-01", Rollout: r.GetId(), Fingerprint: fpX},
			{Node: "node-02", Rollout: r.GetId(), Fingerprint: fpX},
		},
		statuses: []*sluicev1.NodeStatus{{Node: "node-01", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Fingerprint: fpX}},
	}.write(t, env)
	putRaw(t, env, contract.BucketStatus, "node-02", []byte("garbage{"))
	putRaw(t, env, contract.BucketNodeConfigs, contract.DesiredKey("node-03"), []byte(`{"rollout": 5}`))
	putRaw(t, env, contract.BucketRollouts, contract.KeyFence, []byte(`{"leaderEpoch": "4"}`))
	for _, k := range []string{contract.KeyActive} {
		refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
		if _, err := refs.Create(context.Background(), k, &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: revB, Generation: 5}); err != nil {
			t.Fatal(err)
		}
	}

	code, stdout, stderr := sluice(t, env.URL, "rollout", "status")
	if code != ExitSucceeded {
		t.Fatalf("exit code %d, want %d; stderr %s, stdout:\n%s", code, ExitSucceeded, stderr, stdout)
	}
	words := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"node-02 unreadable - <unreadable: " + contract.BucketStatus + "/node-02 value does not decode",
		"node-03 unreadable - <unreadable: " + contract.BucketNodeConfigs + "/node-03.desired value does not decode",
	} {
		if !strings.Contains(words, want) {
			t.Errorf("missing %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "node-01") {
		t.Errorf("a provisioned node is listed:\n%s", stdout)
	}
	if !strings.Contains(stderr, "2 stored value(s) do not decode") {
		t.Errorf("stderr %q does not mention the unreadable values", stderr)
	}
}
