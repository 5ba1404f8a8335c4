package buckets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(context.Background(), contract.StreamOfBucket(bucket))
	if err != nil {
		t.Fatalf("stream of %s: %v", bucket, err)
	}
	return st.CachedInfo().Config
}

// syncBuffer is a log destination goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestManager_EveryBucketAndTheStreamHasOne(t *testing.T) {
	tests := []struct {
		given string
		want  string
	}{
		{contract.BucketIntents, contract.ComponentConfigurator},
		{contract.BucketRevisions, contract.ComponentConfigurator},
		{contract.StreamEvents, contract.ComponentConfigurator},
		{contract.BucketNodeConfigs, contract.ComponentCoordinator},
		{contract.BucketFingerprints, contract.ComponentCoordinator},
		{contract.BucketRollouts, contract.ComponentCoordinator},
		{contract.BucketLeases, contract.ComponentCoordinator},
		{contract.BucketStatus, contract.ComponentCoordinator},
		{contract.BucketNodes, contract.ComponentCoordinator},
		{"sluice-unknown", ""},
	}
	for _, tc := range tests {
		t.Run(tc.given, func(t *testing.T) {
			if got := contract.Manager(tc.given); got != tc.want {
				t.Fatalf("Manager(%s) = %q, want %q", tc.given, got, tc.want)
			}
		})
	}
	for _, cfg := range contract.DefaultSettings().BucketConfigs() {
		if contract.Manager(cfg.Bucket) == "" {
			t.Errorf("bucket %s has no manager", cfg.Bucket)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	def := contract.DefaultSettings()
	with := func(f func(*contract.Settings)) contract.Settings { s := def; f(&s); return s }
	tests := []struct {
		name    string
		given   contract.Settings
		wantErr string
	}{
		{"defaults", def, ""},
		{"R3", with(func(s *contract.Settings) { s.Replicas = 3 }), ""},
		{"no replicas", with(func(s *contract.Settings) { s.Replicas = 0 }), "--replicas 0"},
		{"too many replicas", with(func(s *contract.Settings) { s.Replicas = 7 }), "--replicas 7"},
		{"lease under a second", with(func(s *contract.Settings) { s.LeaderLease = 500 * time.Millisecond }), "--leader-lease 500ms: want at least 1s"},
		{"lease of a second", with(func(s *contract.Settings) { s.LeaderLease = time.Second }), ""},
		{"events without a byte limit", with(func(s *contract.Settings) { s.EventsMaxBytes = -1 }), ""},
		{"events byte limit unset", with(func(s *contract.Settings) { s.EventsMaxBytes = 0 }), "events stream max bytes 0: want at least 1048576 (1 MiB), or -1"},
		{"events byte limit too small", with(func(s *contract.Settings) { s.EventsMaxBytes = 1000 }), "events stream max bytes 1000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.given.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestOpen_BinderWaitsForTheManagerAndCreatesNothing(t *testing.T) {
	env := natstest.StartBare(t)
	// margin: every wait below ends as soon as its condition holds.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := contract.DefaultSettings()
	var logs syncBuffer
	type result struct {
		b   *buckets.Set
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentAgent,
			buckets.WithLog(zerolog.New(&logs)), buckets.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
		done <- result{b, err}
	}()
	natstest.Eventually(t, 30*time.Second, "the agent to log that it waits", func() bool {
		return strings.Contains(logs.String(), "waiting for bucket sluice-nodeconfigs, created by rollout-coordinator")
	})
	select {
	case r := <-done:
		t.Fatalf("agent returned before any bucket existed: %v", r.err)
	default:
	}
	if names := streamNames(t, env.JS); len(names) != 0 {
		t.Fatalf("the agent created %v; it must create nothing", names)
	}

	// The coordinator creates its buckets, then waits for the configurator's.
	coordDone := make(chan error, 1)
	go func() {
		_, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentCoordinator, buckets.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
		coordDone <- err
	}()
	if _, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentConfigurator, buckets.WithBackoff(10*time.Millisecond, 50*time.Millisecond)); err != nil {
		t.Fatalf("configurator: %v", err)
	}
	if err := <-coordDone; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("agent: %v", r.err)
	}
	if r.b.NodeConfigs == nil || r.b.Status == nil || r.b.Nodes == nil || r.b.Intents != nil {
		t.Fatalf("agent buckets: want nodeconfigs, status and nodes only, got %+v", r.b)
	}
	if got := len(streamNames(t, env.JS)); got != len(s.BucketConfigs())+1 {
		t.Fatalf("%d streams, want every bucket and the events stream", got)
	}
}

func streamNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	names := js.StreamNames(context.Background())
	for n := range names.Name() {
		out = append(out, n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpen_SingleServer(t *testing.T) {
	// margin: only bounds a hang, across the subtests' server starts.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	def := contract.DefaultSettings()

	t.Run("R3 on a single server is refused with what to do", func(t *testing.T) {
		env := natstest.StartBare(t)
		s := def
		s.Replicas = 3
		_, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentCoordinator)
		if err == nil || !strings.Contains(err.Error(), "sluice-nodeconfigs") || !strings.Contains(err.Error(), "use --replicas 1") {
			t.Fatalf("got %v, want an error naming the bucket and --replicas 1", err)
		}
	})
	t.Run("the owner changes the node lease, an agent takes the one in force", func(t *testing.T) {
		env := natstest.Start(t, def)
		s := def
		s.NodeLease = 30 * time.Second
		b, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentAgent)
		if err != nil || b.NodeLease != def.NodeLease {
			t.Fatalf("agent started with 30s: node lease %s, %v; want the bucket's %s", b.GetNodeLease(), err, def.NodeLease)
		}
		if _, err := buckets.Prepare(ctx, env.JS, s, contract.ComponentCoordinator); err != nil {
			t.Fatalf("coordinator: %v", err)
		}
		if got := streamConfig(t, env.JS, contract.BucketNodes).MaxAge; got != 30*time.Second {
			t.Fatalf("nodes TTL %s after the owner started with 30s", got)
		}
		b, err = buckets.Prepare(ctx, env.JS, def, contract.ComponentAgent)
		if err != nil || b.NodeLease != 30*time.Second {
			t.Fatalf("agent after the owner's update: node lease %s, %v; want 30s", b.GetNodeLease(), err)
		}
		if got, err := buckets.NodeLease(ctx, env.JS); err != nil || got != 30*time.Second {
			t.Fatalf("NodeLease: %s, %v; want 30s", got, err)
		}
	})
	t.Run("memory buckets are not durable enough for a file-storage binder", func(t *testing.T) {
		s := def
		s.Memory = true
		env := natstest.Start(t, s)
		_, err := buckets.Prepare(ctx, env.JS, def, contract.ComponentReaper)
		if !errors.Is(err, buckets.ErrMismatch) || !strings.Contains(err.Error(), "storage") {
			t.Fatalf("got %v, want a storage mismatch", err)
		}
		_, err = buckets.Prepare(ctx, env.JS, def, contract.ComponentConfigurator)
		if !errors.Is(err, buckets.ErrMismatch) || !strings.Contains(err.Error(), "cannot change a stream's storage type") {
			t.Fatalf("owner: got %v, want a storage mismatch", err)
		}
	})
	t.Run("a second start of the owner changes nothing", func(t *testing.T) {
		env := natstest.Start(t, def)
		before := streamConfig(t, env.JS, contract.BucketNodeConfigs)
		if _, err := buckets.Prepare(ctx, env.JS, def, contract.ComponentCoordinator); err != nil {
			t.Fatal(err)
		}
		st, err := env.JS.Stream(ctx, contract.StreamOfBucket(contract.BucketNodeConfigs))
		if err != nil {
			t.Fatal(err)
		}
		if after := st.CachedInfo().Config; !before.AllowAtomicPublish || !after.AllowAtomicPublish || after.Replicas != before.Replicas {
			t.Fatalf("before %+v after %+v", before, after)
		}
	})
}

// TestOpen_Cluster runs on one 3-node cluster with R3 buckets.
func TestOpen_Cluster(t *testing.T) {
	c := natstest.StartCluster(t, 3, contract.DefaultSettings())
	// margin: only bounds a hang; every call returns with its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r1 := contract.DefaultSettings()

	t.Run("the owner with --replicas 1 on an R3 bucket is a startup error and scales nothing down", func(t *testing.T) {
		_, err := buckets.Prepare(ctx, c.JS, r1, contract.ComponentCoordinator)
		var mm *buckets.MismatchError
		if !errors.As(err, &mm) || mm.Name != contract.BucketNodeConfigs || mm.Setting != "replicas" || mm.Found != "3" || mm.Want != "1" {
			t.Fatalf("got %v, want a replicas mismatch on %s found 3 want 1", err, contract.BucketNodeConfigs)
		}
		if !strings.Contains(err.Error(), "--replicas 3") {
			t.Fatalf("error %q does not say what to do", err)
		}
		if got := streamConfig(t, c.JS, contract.BucketNodeConfigs).Replicas; got != 3 {
			t.Fatalf("replicas %d after a refused start, want 3", got)
		}
		if err := buckets.Ensure(ctx, c.JS, r1); !errors.Is(err, buckets.ErrMismatch) {
			t.Fatalf("Ensure with 1 replica: got %v, want ErrMismatch", err)
		}
	})
	t.Run("a binder with --replicas 1 accepts R3", func(t *testing.T) {
		if _, err := buckets.Prepare(ctx, c.JS, r1, contract.ComponentAgent); err != nil {
			t.Fatal(err)
		}
		if _, err := buckets.Prepare(ctx, c.JS, r1, contract.ComponentReaper); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an R1 bucket without atomic publish is waited for by binders and upgraded by its owner", func(t *testing.T) {
		if err := c.JS.DeleteKeyValue(ctx, contract.BucketRollouts); err != nil {
			t.Fatal(err)
		}
		old := r1.BucketConfigs()[6]
		if old.Bucket != contract.BucketRollouts {
			t.Fatalf("bucket order changed: %s", old.Bucket)
		}
		if _, err := c.JS.CreateKeyValue(ctx, old); err != nil {
			t.Fatal(err)
		}
		r3 := r1
		r3.Replicas = 3
		_, err := buckets.Prepare(ctx, c.JS, r3, contract.ComponentReaper)
		var mm *buckets.MismatchError
		if !errors.As(err, &mm) || mm.Name != contract.BucketRollouts || mm.Setting != "replicas" || mm.Want != "at least 3" {
			t.Fatalf("binder with --replicas 3 on R1: got %v", err)
		}
		// The binder waits until it is stopped: stopped once it said what it
		// waits for (a timeout could end it before it got that far).
		var logs syncBuffer
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		waited := make(chan error, 1)
		go func() {
			_, err := buckets.Prepare(wctx, c.JS, r1, contract.ComponentCLI,
				buckets.WithLog(zerolog.New(&logs)), buckets.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
			waited <- err
		}()
		// margin: the poll ends as soon as the line is logged.
		natstest.Eventually(t, 30*time.Second, "the binder to wait for the manager", func() bool {
			return strings.Contains(logs.String(), "waiting for bucket sluice-rollouts to allow atomic publish, enabled by rollout-coordinator") ||
				len(waited) > 0
		})
		wcancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("binder on a bucket without atomic publish: got %v, logged %s; want it to wait for the manager until stopped", err, logs.String())
		}
		if _, err := buckets.Prepare(ctx, c.JS, r3, contract.ComponentCoordinator); err != nil {
			t.Fatalf("owner upgrade: %v", err)
		}
		got := streamConfig(t, c.JS, contract.BucketRollouts)
		if got.Replicas != 3 || !got.AllowAtomicPublish {
			t.Fatalf("after the owner's start: replicas %d allow_atomic %v, want 3 and true", got.Replicas, got.AllowAtomicPublish)
		}
		if _, err := buckets.Prepare(ctx, c.JS, r3, contract.ComponentReaper); err != nil {
			t.Fatalf("binder after the upgrade: %v", err)
		}
	})
}

// The events stream's byte limit comes to a stream made before it existed
// by an update, not by recreating it: the events it holds stay. A larger
// limit an operator set is kept.
func TestOpen_EventsStreamGetsItsByteLimitInPlace(t *testing.T) {
	// margin: only bounds a hang; every call returns with its answer.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := natstest.StartBare(t)
	old := contract.DefaultSettings()
	old.EventsMaxBytes = -1 // as every stream was created before the limit
	if err := buckets.Ensure(ctx, env.JS, old); err != nil {
		t.Fatal(err)
	}
	events := func() jetstream.StreamInfo {
		t.Helper()
		st, err := env.JS.Stream(ctx, contract.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return *info
	}
	if _, err := env.JS.Publish(ctx, contract.EventSubject(contract.KindNode, "n1"), []byte(`{"type":"Old"}`)); err != nil {
		t.Fatal(err)
	}
	before := events()
	if before.Config.MaxBytes != -1 {
		t.Fatalf("the old stream has max bytes %d, want -1", before.Config.MaxBytes)
	}

	if _, err := buckets.Prepare(ctx, env.JS, contract.DefaultSettings(), contract.ComponentConfigurator); err != nil {
		t.Fatal(err)
	}
	after := events()
	if after.Config.MaxBytes != contract.DefaultEventsMaxBytes {
		t.Fatalf("max bytes %d after the manager's start, want %d", after.Config.MaxBytes, int64(contract.DefaultEventsMaxBytes))
	}
	if !after.Created.Equal(before.Created) || after.State.Msgs != 1 {
		t.Fatalf("the stream was recreated or lost events: created %s → %s, %d messages", before.Created, after.Created, after.State.Msgs)
	}

	// An operator raises the limit on purpose; the manager keeps it.
	raised := after.Config
	raised.MaxBytes = 2 * contract.DefaultEventsMaxBytes
	if _, err := env.JS.UpdateStream(ctx, raised); err != nil {
		t.Fatal(err)
	}
	if _, err := buckets.Prepare(ctx, env.JS, contract.DefaultSettings(), contract.ComponentConfigurator); err != nil {
		t.Fatal(err)
	}
	if got := events().Config.MaxBytes; got != 2*contract.DefaultEventsMaxBytes {
		t.Fatalf("max bytes %d after the manager's restart, want the operator's %d kept", got, int64(2*contract.DefaultEventsMaxBytes))
	}
}

// TestAtomicBatch_CommitsIntoFencedBuckets checks nats-server allows atomic
// batches on the KV streams the coordinator fences (file and memory, R1 and
// R3): a batch that checks the fence commits whole, one whose fence moved
// stores nothing.
func TestAtomicBatch_CommitsIntoFencedBuckets(t *testing.T) {
	def := contract.DefaultSettings()
	mem := def
	mem.Memory = true
	tests := []struct {
		name  string
		given func(t *testing.T) *natstest.Env
	}{
		{"R1 file", func(t *testing.T) *natstest.Env { return natstest.Start(t, def) }},
		{"R1 memory", func(t *testing.T) *natstest.Env { return natstest.Start(t, mem) }},
		{"R3 file", func(t *testing.T) *natstest.Env { return natstest.StartCluster(t, 3, def).Env }},
		{"R3 memory", func(t *testing.T) *natstest.Env { return natstest.StartCluster(t, 3, mem).Env }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.given(t)
			// margin: only bounds a hang; every call returns with its answer.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for _, bucket := range []string{contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketFingerprints} {
				if cfg := streamConfig(t, env.JS, bucket); !cfg.AllowAtomicPublish {
					t.Fatalf("%s: allow_atomic is false", bucket)
				}
			}
			kv := env.Buckets.NodeConfigs
			sub, err := env.Conn.SubscribeSync(contract.NodeConfigSubject("n1"))
			if err != nil {
				t.Fatal(err)
			}
			fence, err := kv.Create(ctx, contract.KeyFence, []byte(`{"epoch":1}`))
			if err != nil {
				t.Fatal(err)
			}
			ack := publishFencedBatch(t, env.Conn, "b1", contract.BucketNodeConfigs, fence, map[string]string{
				contract.DesiredKey("n1"): `{"node":"n1","fingerprint":"a"}`,
				contract.BackupKey("n1"):  `{"node":"n1","fingerprint":"0"}`,
			})
			if ack.Error != nil || ack.Count != 2 {
				t.Fatalf("fenced batch: %+v", ack)
			}
			if v := leaderGet(t, env.Conn, contract.BucketNodeConfigs, contract.DesiredKey("n1")); !strings.Contains(v, `"a"`) {
				t.Fatalf("desired after the batch: %s", v)
			}
			if _, err := sub.NextMsg(30 * time.Second); err != nil { // margin: returns as soon as it comes
				t.Fatalf("a batch write is not republished to the agent's subject: %v", err)
			}

			// A new term moves the fence; a batch of the old term stores nothing.
			if _, err := kv.Update(ctx, contract.KeyFence, []byte(`{"epoch":2}`), fence); err != nil {
				t.Fatal(err)
			}
			ack = publishFencedBatch(t, env.Conn, "b2", contract.BucketNodeConfigs, fence, map[string]string{
				contract.DesiredKey("n1"): `{"node":"n1","fingerprint":"stale"}`,
				contract.BackupKey("n1"):  `{"node":"n1","fingerprint":"stale"}`,
			})
			if ack.Error == nil || ack.Error.ErrCode != int(jetstream.JSErrCodeStreamWrongLastSequence) {
				t.Fatalf("stale batch: got %+v, want wrong last sequence (10071)", ack)
			}
			for _, key := range []string{contract.DesiredKey("n1"), contract.BackupKey("n1")} {
				if v := leaderGet(t, env.Conn, contract.BucketNodeConfigs, key); strings.Contains(v, "stale") {
					t.Fatalf("%s after the stale batch: %s", key, v)
				}
			}
		})
	}
}

// leaderGet is key's last value as the stream's leader has it. A KV Get is
// a direct get, which on R3 any replica may answer, one that has not caught
// up with the write just acknowledged included.
func leaderGet(t *testing.T, nc *nats.Conn, bucket, key string) string {
	t.Helper()
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		t.Fatal(err)
	}
	// margin: returns with the leader's answer.
	reply, err := nc.Request("$JS.API.STREAM.MSG.GET."+contract.StreamOfBucket(bucket), req, 30*time.Second)
	if err != nil {
		t.Fatalf("get %s/%s from the leader: %v", bucket, key, err)
	}
	var resp struct {
		Error   *struct{ Description string } `json:"error"`
		Message struct {
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil || resp.Error != nil {
		t.Fatalf("get %s/%s from the leader: %s (%v)", bucket, key, reply.Data, err)
	}
	return string(resp.Message.Data)
}

type batchAck struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Seq   uint64 `json:"seq"`
	Batch string `json:"batch"`
	Count int    `json:"count"`
}

// publishFencedBatch publishes one atomic batch writing values (in key
// order), every message checking that the fence key is at revision fence.
func publishFencedBatch(t *testing.T, nc *nats.Conn, id, bucket string, fence uint64, values map[string]string) batchAck {
	t.Helper()
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	if len(keys) == 2 && keys[0] > keys[1] {
		keys[0], keys[1] = keys[1], keys[0]
	}
	var reply *nats.Msg
	for i, k := range keys {
		m := nats.NewMsg("$KV." + bucket + "." + k)
		m.Data = []byte(values[k])
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(fence, 10))
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "$KV."+bucket+"."+contract.KeyFence)
		if i == len(keys)-1 {
			m.Header.Set("Nats-Batch-Commit", "1")
		}
		var err error
		// margin: returns with the answer; an R3 commit on a loaded machine
		// can take seconds.
		if reply, err = nc.RequestMsg(m, 30*time.Second); err != nil {
			t.Fatalf("batch %s message %d: %v", id, i+1, err)
		}
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		t.Fatalf("batch %s ack %q: %v", id, reply.Data, err)
	}
	return ack
}

// The manager of the control bucket (and Ensure) gives the store its
// identity once: a second start keeps it, and the value is well-formed for
// its key; a store without one (started afresh) gets another.
func TestPrepare_TheControlBucketsManagerStampsTheStoreOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // margin: nothing here waits
	defer cancel()
	env := natstest.Start(t, contract.DefaultSettings()) // buckets.Ensure
	read := func(t *testing.T) string {
		t.Helper()
		e, err := env.Buckets.Control.Get(ctx, contract.KeyStoreID)
		if err != nil {
			t.Fatalf("control/%s: %v", contract.KeyStoreID, err)
		}
		v := &sluicev1.StoreID{}
		if err := store.Decode(contract.BucketControl, contract.KeyStoreID, e.Value(), v); err != nil {
			t.Fatalf("control/%s: %v", contract.KeyStoreID, err)
		}
		if len(v.GetId()) != 32 || v.GetCreatedAt() == nil {
			t.Fatalf("control/%s = %v, want a 128-bit hex id and a time", contract.KeyStoreID, v)
		}
		return v.GetId()
	}
	manager := contract.Manager(contract.BucketControl)
	first := read(t)
	if _, err := buckets.Prepare(ctx, env.JS, env.Settings, manager); err != nil {
		t.Fatal(err)
	}
	if err := buckets.Ensure(ctx, env.JS, env.Settings); err != nil {
		t.Fatal(err)
	}
	if again := read(t); again != first {
		t.Fatalf("store id %s after the manager started again, want the first one %s kept", again, first)
	}
	if err := env.Buckets.Control.Purge(ctx, contract.KeyStoreID); err != nil {
		t.Fatal(err)
	}
	if _, err := buckets.Prepare(ctx, env.JS, env.Settings, manager); err != nil {
		t.Fatal(err)
	}
	if id := read(t); id == first {
		t.Fatalf("the manager stamped a store without an id with the old id %s", id)
	}
}

// The leases bucket's TTL is the lease a leader renews by: the coordinator
// (its manager) and Ensure set it to their --leader-lease only while no
// lease is held, and keep it, and say so, while one is (issue 38: a
// coordinator started beside a leader with a longer lease cut the TTL under
// it, and its lease expired between two renewals).
func TestPrepare_LeasesTTLChangesOnlyWhileNoLeaseIsHeld(t *testing.T) {
	const running, flag = 10 * time.Second, 2 * time.Second
	tests := []struct {
		name     string
		given    func(ctx context.Context, kv jetstream.KeyValue) error // the lease key before the start
		wantTTL  time.Duration
		wantKept bool // the log says the TTL was kept
	}{
		{"a lease is held", func(ctx context.Context, kv jetstream.KeyValue) error {
			_, err := kv.Put(ctx, contract.LeaseCoordinator, []byte("held"))
			return err
		}, running, true},
		{"no lease was ever held", func(context.Context, jetstream.KeyValue) error { return nil }, flag, false},
		{"the lease was released", func(ctx context.Context, kv jetstream.KeyValue) error {
			rev, err := kv.Put(ctx, contract.LeaseCoordinator, []byte("held"))
			if err != nil {
				return err
			}
			return kv.Delete(ctx, contract.LeaseCoordinator, jetstream.LastRevision(rev))
		}, flag, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // margin: nothing here waits
			defer cancel()
			s := contract.DefaultSettings()
			s.LeaderLease = running
			env := natstest.Start(t, s) // buckets.Ensure, with the running lease
			if err := tt.given(ctx, env.Buckets.Leases); err != nil {
				t.Fatal(err)
			}
			s.LeaderLease = flag
			var logs syncBuffer
			set, err := buckets.Prepare(ctx, env.JS, s, contract.Manager(contract.BucketLeases), buckets.WithLog(zerolog.New(&logs)))
			if err != nil {
				t.Fatal(err)
			}
			cfg := streamConfig(t, env.JS, contract.BucketLeases)
			if cfg.MaxAge != tt.wantTTL || set.LeaderLease != tt.wantTTL {
				t.Fatalf("leases TTL %s, Set.LeaderLease %s after a start with --leader-lease %s; want %s",
					cfg.MaxAge, set.LeaderLease, flag, tt.wantTTL)
			}
			if cfg.Duplicates > cfg.MaxAge || cfg.SubjectDeleteMarkerTTL < cfg.MaxAge {
				t.Fatalf("leases duplicates window %s, marker TTL %s: want them as for a TTL of %s", cfg.Duplicates, cfg.SubjectDeleteMarkerTTL, cfg.MaxAge)
			}
			if kept := strings.Contains(logs.String(), "keeping the leader lease 10s"); kept != tt.wantKept {
				t.Fatalf("log says the TTL was kept: %v, want %v; log:\n%s", kept, tt.wantKept, logs.String())
			}
			// An installer's Ensure follows the same rule.
			if err := buckets.Ensure(ctx, env.JS, s); err != nil {
				t.Fatal(err)
			}
			if got := streamConfig(t, env.JS, contract.BucketLeases).MaxAge; got != tt.wantTTL {
				t.Fatalf("leases TTL %s after Ensure with %s, want %s", got, flag, tt.wantTTL)
			}
		})
	}
}
