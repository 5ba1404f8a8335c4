package creds_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natsauth"
)

// denials collects the permission violations the server reports to one
// connection.
type denials struct {
	mu   sync.Mutex
	seen []string
}

func (d *denials) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if natsauth.IsPermissionViolation(err) {
		d.mu.Lock()
		d.seen = append(d.seen, err.Error())
		d.mu.Unlock()
	}
}

// has reports whether a violation naming subject was reported.
func (d *denials) has(subject string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.seen {
		if strings.Contains(s, `"`+subject+`"`) {
			return true
		}
	}
	return false
}

type user struct {
	nc *nats.Conn
	js jetstream.JetStream
	d  *denials
}

func connectAs(t *testing.T, env *natstest.Env, role, node string, opts ...nats.Option) user {
	t.Helper()
	file, err := env.Creds.Issue(role, node)
	if err != nil {
		t.Fatal(err)
	}
	d := &denials{}
	nc := env.ConnectAs(t, file, append(opts, nats.ErrorHandler(d.handler))...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return user{nc, js, d}
}

// refused runs op, which must fail, and checks that the server reported a
// permission violation for subject.
func refused(t *testing.T, u user, what, subject string, op func(context.Context) error) {
	t.Helper()
	// The server refuses at once; the operation then waits for an answer
	// that never comes, so it is cancelled once the refusal is seen. A
	// short timeout instead could end it before its request was even sent
	// on a loaded machine, and no refusal would ever come.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- op(ctx) }()
	var err error
	done := false
	// margin: the poll ends as soon as the refusal (or a success) is seen.
	natstest.Eventually(t, 30*time.Second, what+": a permission violation for "+subject, func() bool {
		if !done {
			select {
			case err = <-errc:
				done = true
			default:
			}
		}
		return u.d.has(subject) || (done && err == nil)
	})
	cancel()
	if !done {
		err = <-errc
	}
	if err == nil {
		t.Errorf("%s: succeeded; want it refused", what)
	}
}

func kvOf(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatalf("bind %s: %v", bucket, err)
	}
	return kv
}

// TestNodeUser_ReachesItsOwnKeysAndNothingElse: node-01's credentials bind
// the agent's buckets, read its own desired config, write its own status
// and presence and publish its own events; every other node's keys, every
// desired config, the fingerprints, rollouts and the lease are refused by
// the server, each with a permission violation naming the subject.
func TestNodeUser_ReachesItsOwnKeysAndNothingElse(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	ctx := context.Background()
	b := env.Buckets
	for _, n := range []string{"node-01", "node-02"} {
		if _, err := b.NodeConfigs.Put(ctx, contract.DesiredKey(n), []byte(`{"node":"`+n+`"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Status.Put(ctx, n, []byte(`{"node":"`+n+`"}`)); err != nil {
			t.Fatal(err)
		}
	}

	u := connectAs(t, env, creds.RoleNode, "node-01", nats.CustomInboxPrefix(creds.NodeInboxPrefix("node-01")))
	if _, err := buckets.Prepare(ctx, u.js, env.Settings, contract.ComponentAgent); err != nil {
		t.Fatalf("the agent's buckets, bound with node-01's credentials: %v", err)
	}
	configs, status := kvOf(t, u.js, contract.BucketNodeConfigs), kvOf(t, u.js, contract.BucketStatus)
	presence, control := kvOf(t, u.js, contract.BucketNodes), kvOf(t, u.js, contract.BucketControl)

	// What it may do.
	if e, err := configs.Get(ctx, contract.DesiredKey("node-01")); err != nil || !strings.Contains(string(e.Value()), "node-01") {
		t.Fatalf("node-01 reads its desired config: %v", err)
	}
	if e, err := status.Get(ctx, "node-01"); err != nil {
		t.Fatalf("node-01 reads its status: %v", err)
	} else if _, err := status.Update(ctx, "node-01", []byte(`{"node":"node-01","phase":"NODE_PHASE_PROVISIONED"}`), e.Revision()); err != nil {
		t.Fatalf("node-01 writes its status: %v", err)
	}
	if _, err := presence.Create(ctx, "node-01", []byte(`{"node":"node-01"}`)); err != nil {
		t.Fatalf("node-01 writes its presence: %v", err)
	}
	if _, err := control.Get(ctx, contract.KeyPause); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("node-01 reads the pause: %v", err)
	}
	if _, err := control.Get(ctx, contract.KeyStoreID); err != nil {
		t.Fatalf("node-01 reads the store's identity: %v", err)
	}
	if _, err := u.js.Publish(ctx, contract.EventSubject(contract.KindNode, "node-01"), []byte(`{}`)); err != nil {
		t.Fatalf("node-01 publishes its events: %v", err)
	}
	if _, err := u.js.Publish(ctx, contract.EventSubject(contract.KindInstance, contract.InstanceKey(contract.ComponentAgent, "node-01")), []byte(`{}`)); err != nil {
		t.Fatalf("node-01 publishes its pause acknowledgement: %v", err)
	}
	for _, k := range []struct{ bucket, key string }{
		{contract.BucketNodeConfigs, contract.DesiredKey("node-01")}, {contract.BucketStatus, "node-01"},
		{contract.BucketNodes, "node-01"}, {contract.BucketControl, contract.KeyPause},
	} {
		subj := contract.EventSubject(contract.KindQuarantine, contract.QuarantineID(k.bucket, k.key))
		if _, err := u.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatalf("node-01 reports an unreadable value it read (%s): %v", subj, err)
		}
	}
	sub, err := u.nc.SubscribeSync(contract.NodeConfigSubject("node-01"))
	if err != nil {
		t.Fatal(err)
	}
	// The write below goes over another connection: until the server has
	// node-01's subscription, the republished message has no one to reach.
	if err := u.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.NodeConfigs.Put(ctx, contract.DesiredKey("node-01"), []byte(`{"node":"node-01","rollout":"r2"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(30 * time.Second); err != nil { // margin: returns as soon as the message comes
		t.Fatalf("node-01 hears of its desired config: %v", err)
	}

	// What it may not.
	kvSubj := func(bucket, key string) string { return "$KV." + bucket + "." + key }
	get := func(bucket, key string) string {
		return "$JS.API.DIRECT.GET." + contract.StreamOfBucket(bucket) + "." + kvSubj(bucket, key)
	}
	refused(t, u, "read node-02's desired config", get(contract.BucketNodeConfigs, contract.DesiredKey("node-02")), func(ctx context.Context) error {
		_, err := configs.Get(ctx, contract.DesiredKey("node-02"))
		return err
	})
	refused(t, u, "read node-02's status", get(contract.BucketStatus, "node-02"), func(ctx context.Context) error {
		_, err := status.Get(ctx, "node-02")
		return err
	})
	refused(t, u, "write node-02's status", kvSubj(contract.BucketStatus, "node-02"), func(ctx context.Context) error {
		_, err := status.Put(ctx, "node-02", []byte(`{"node":"node-02","phase":"NODE_PHASE_INVALID"}`))
		return err
	})
	refused(t, u, "write node-02's presence", kvSubj(contract.BucketNodes, "node-02"), func(ctx context.Context) error {
		_, err := presence.Put(ctx, "node-02", []byte(`{"node":"node-02"}`))
		return err
	})
	refused(t, u, "write its own desired config", kvSubj(contract.BucketNodeConfigs, contract.DesiredKey("node-01")), func(ctx context.Context) error {
		_, err := configs.Put(ctx, contract.DesiredKey("node-01"), []byte(`{}`))
		return err
	})
	ack02 := contract.EventSubject(contract.KindInstance, contract.InstanceKey(contract.ComponentAgent, "node-02"))
	refused(t, u, "publish node-02's pause acknowledgement", ack02, func(ctx context.Context) error {
		_, err := u.js.Publish(ctx, ack02, []byte(`{}`))
		return err
	})
	q02 := contract.EventSubject(contract.KindQuarantine, contract.QuarantineID(contract.BucketStatus, "node-02"))
	refused(t, u, "report node-02's status unreadable", q02, func(ctx context.Context) error {
		_, err := u.js.Publish(ctx, q02, []byte(`{}`))
		return err
	})
	// No event subject but its own (I11): not another node's, not one of a
	// node whose name starts with its own, not a rollout's, the leader's or
	// any other kind's.
	for _, subj := range []string{
		contract.EventSubject(contract.KindNode, "node-02"),
		contract.EventSubject(contract.KindNode, "node-01.x"),
		contract.EventSubject(contract.KindRollout, "1-0123456789ab"),
		contract.EventSubject(contract.KindLeader, contract.ComponentCoordinator),
		contract.EventSubject(contract.KindFingerprint, "0123456789abcdef"),
		contract.EventSubject(contract.KindInstance, contract.InstanceKey(contract.ComponentCoordinator, "node-01")),
	} {
		refused(t, u, "publish "+subj, subj, func(ctx context.Context) error {
			_, err := u.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
	for _, w := range []struct{ bucket, key string }{
		{contract.BucketFingerprints, "0123456789abcdef"},
		{contract.BucketRollouts, "active"},
		{contract.BucketLeases, contract.LeaseCoordinator},
		{contract.BucketIntents, "layer2.x"},
	} {
		subj := kvSubj(w.bucket, w.key)
		refused(t, u, "write "+w.bucket+"/"+w.key, subj, func(ctx context.Context) error {
			_, err := u.js.Publish(ctx, subj, []byte(`{}`))
			return err
		})
	}
	refused(t, u, "bind the fingerprints bucket", "$JS.API.STREAM.INFO."+contract.StreamOfBucket(contract.BucketFingerprints), func(ctx context.Context) error {
		_, err := u.js.KeyValue(ctx, contract.BucketFingerprints)
		return err
	})
	refused(t, u, "update a bucket", "$JS.API.STREAM.UPDATE."+contract.StreamOfBucket(contract.BucketStatus), func(ctx context.Context) error {
		_, err := u.js.UpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contract.BucketStatus, History: 5})
		return err
	})
	// margin: each poll ends as soon as the server's refusal arrives.
	if _, err := u.nc.Subscribe(contract.NodeConfigSubject("node-02"), func(*nats.Msg) {}); err == nil {
		natstest.Eventually(t, 30*time.Second, "a permission violation for the subscription to node-02's configs",
			func() bool { return u.d.has(contract.NodeConfigSubject("node-02")) })
	}
	if _, err := u.nc.Subscribe("_INBOX.>", func(*nats.Msg) {}); err == nil {
		natstest.Eventually(t, 30*time.Second, "a permission violation for the subscription to every inbox",
			func() bool { return u.d.has("_INBOX.>") })
	}
	lg02 := contract.LastGoodSubject("node-02")
	if _, err := u.nc.Subscribe(lg02, func(*nats.Msg) {}); err == nil {
		natstest.Eventually(t, 30*time.Second, "a permission violation for the subscription to node-02's last-good requests",
			func() bool { return u.d.has(lg02) })
	}
}

// TestLastGoodRequest_OnlyTheNodeAnswersAndOnlyTheOperatorAsks: `sluice
// recover --from-nodes` asks each agent for its last-good on
// sluice.node.<node>.lastgood. node-01 may answer its own subject (through
// the response permission) and nothing else: it may not publish to an
// inbox it was not asked from. The admin role asks; the read-only role may
// not.
func TestLastGoodRequest_OnlyTheNodeAnswersAndOnlyTheOperatorAsks(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	n1 := connectAs(t, env, creds.RoleNode, "node-01", nats.CustomInboxPrefix(creds.NodeInboxPrefix("node-01")))
	subj := contract.LastGoodSubject("node-01")
	if _, err := n1.nc.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte(`{"node":"node-01"}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := n1.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	admin := connectAs(t, env, creds.RoleAdmin, "")
	// margin: returns with the answer, in milliseconds.
	m, err := admin.nc.Request(subj, nil, 30*time.Second)
	if err != nil || !strings.Contains(string(m.Data), "node-01") {
		t.Fatalf("the admin asks node-01 for its last-good: %v", err)
	}
	if n1.d.has(m.Subject) {
		t.Fatalf("node-01's answer to %s was refused", m.Subject)
	}
	ro := connectAs(t, env, creds.RoleReadOnly, "")
	refused(t, ro, "the read-only role asks node-01 for its last-good", subj, func(ctx context.Context) error {
		_, err := ro.nc.RequestWithContext(ctx, subj, nil)
		return err
	})
	// An answer is one reply to a request received, not a publish to any
	// inbox: node-01 cannot write into the admin's replies unasked.
	inbox := nats.NewInbox()
	if err := n1.nc.Publish(inbox, []byte(`{"node":"node-02"}`)); err == nil {
		natstest.Eventually(t, 30*time.Second, "a permission violation for node-01 publishing to an inbox unasked",
			func() bool { return n1.d.has(inbox) })
	}
}

// TestOnlyTheCoordinatorWritesTheLease: the admin, configurator and reaper
// roles are refused the lease; the coordinator writes it.
func TestOnlyTheCoordinatorWritesTheLease(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	subj := "$KV." + contract.BucketLeases + "." + contract.LeaseCoordinator
	for _, role := range []string{creds.RoleAdmin, creds.RoleConfigurator, creds.RoleReaper, creds.RoleReadOnly} {
		u := connectAs(t, env, role, "")
		refused(t, u, role+" writes the lease", subj, func(ctx context.Context) error {
			_, err := u.js.Publish(ctx, subj, []byte(`{"holder":"rogue"}`))
			return err
		})
		purge := "$JS.API.STREAM.PURGE." + contract.StreamOfBucket(contract.BucketLeases)
		refused(t, u, role+" purges the lease bucket", purge, func(ctx context.Context) error {
			s, err := u.js.Stream(ctx, contract.StreamOfBucket(contract.BucketLeases))
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
	}
	u := connectAs(t, env, creds.RoleCoordinator, "")
	if _, err := u.js.Publish(context.Background(), subj, []byte(`{"holder":"c1"}`)); err != nil {
		t.Fatalf("the coordinator writes the lease: %v", err)
	}
}

// TestReadOnlyUser_ReadsButCannotWrite: the read-only role reads buckets and
// the events stream but cannot write a key or call the configurator's API.
func TestReadOnlyUser_ReadsButCannotWrite(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	ctx := context.Background()
	if _, err := env.Buckets.Status.Put(ctx, "node-01", []byte(`{"node":"node-01"}`)); err != nil {
		t.Fatal(err)
	}
	u := connectAs(t, env, creds.RoleReadOnly, "")
	if _, err := buckets.Prepare(ctx, u.js, env.Settings, contract.ComponentCLI); err != nil {
		t.Fatalf("bind every bucket read-only: %v", err)
	}
	status := kvOf(t, u.js, contract.BucketStatus)
	if _, err := status.Get(ctx, "node-01"); err != nil {
		t.Fatalf("read a status: %v", err)
	}
	keys, err := status.ListKeys(ctx)
	if err != nil {
		t.Fatalf("list the statuses: %v", err)
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if n != 1 {
		t.Fatalf("listed %d status keys, want 1", n)
	}
	refused(t, u, "write a status", "$KV."+contract.BucketStatus+".node-01", func(ctx context.Context) error {
		_, err := status.Put(ctx, "node-01", []byte(`{}`))
		return err
	})
	refused(t, u, "apply", contract.SubjectApply, func(ctx context.Context) error {
		_, err := u.nc.RequestWithContext(ctx, contract.SubjectApply, []byte(`{}`))
		return err
	})
}

// TestRevokedNode_IsDisconnectedAndCannotConnect: revoking node-01 and
// pushing the account ends its connection at once and refuses the next;
// node-02 is untouched.
func TestRevokedNode_IsDisconnectedAndCannotConnect(t *testing.T) {
	t.Parallel()
	env := natstest.StartSecure(t, contract.DefaultSettings())
	n1file, err := env.Creds.Issue(creds.RoleNode, "node-01")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	n1, err := nats.Connect(env.URL, nats.UserCredentials(n1file), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer n1.Close()
	n2 := connectAs(t, env, creds.RoleNode, "node-02")

	revoked, err := env.Creds.Revoke("node-01")
	if err != nil || len(revoked) != 1 || revoked[0].Node != "node-01" {
		t.Fatalf("revoke node-01: %v, %v", revoked, err)
	}
	sys, err := nats.Connect(env.URL, nats.UserCredentials(env.Creds.SystemCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	// margin: Push returns with the server's answer; the bounds only catch
	// a hang. "At once" is checked as 30s, far above the milliseconds it takes.
	if err := env.Creds.Push(sys, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("node-01's connection is still open 30s after its revocation was pushed")
	}
	if nc, err := nats.Connect(env.URL, nats.UserCredentials(n1file)); err == nil {
		nc.Close()
		t.Fatal("node-01 connected again after its revocation")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("node-01 connecting again: %v; want an authorization error", err)
	}
	if !n2.nc.IsConnected() {
		t.Fatal("node-02 lost its connection when node-01 was revoked")
	}
}
