package buckets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/codec"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// stampStoreID gives the store its identity, control/store.id (a StoreID
// with a random id), unless it has one: Create, so the first manager to
// write it wins and every later start keeps it. A store lost and started
// afresh is given a new one by the first manager that starts on it; agents
// that kept running tell by it that the leader epochs and nodeconfigs
// revisions they remember were another store's (docs/agent.md).
func (c openConfig) stampStoreID(ctx context.Context, js jetstream.JetStream) error {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("store identity (%s/%s): random id: %w", contract.BucketControl, contract.KeyStoreID, err)
	}
	v, err := codec.Marshal(&sluicev1.StoreID{Id: hex.EncodeToString(raw[:]), CreatedAt: timestamppb.Now()})
	if err != nil {
		return fmt.Errorf("store identity (%s/%s): %w", contract.BucketControl, contract.KeyStoreID, err)
	}
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var kv jetstream.KeyValue
		kv, err = js.KeyValue(cctx, contract.BucketControl)
		if err == nil {
			_, err = kv.Create(cctx, contract.KeyStoreID, v)
		}
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return fmt.Errorf("write the store identity %s/%s: %w", contract.BucketControl, contract.KeyStoreID, err)
		}
		delay := retry.Next()
		c.log.Info().Str("bucket", contract.BucketControl).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for JetStream to write the store identity %s/%s", contract.BucketControl, contract.KeyStoreID)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return fmt.Errorf("write the store identity %s/%s: %w", contract.BucketControl, contract.KeyStoreID, err)
		}
	}
}

// manage creates the bucket or stream when missing and updates the fields
// sluice manages when they differ, refusing to lower replicas or to change
// the storage type. It returns the TTL it kept instead of the one wanted
// (see keptTTL), zero when it kept none.
func (w want) manage(ctx context.Context, js jetstream.JetStream, component string) (kept time.Duration, err error) {
	cur, err := streamConfig(ctx, js, w.stream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := w.create(ctx, js); err != nil {
			return 0, err
		}
		// On a cluster a stream just created (by us, or by another manager
		// starting at the same time: then create saw "already exists") can
		// be "not found" for a moment where the assignment is not applied
		// yet: ask again, within formingWait.
		for n, until := 0, time.Now().Add(formingWait); ; n++ {
			cur, err = streamConfig(ctx, js, w.stream())
			if !errors.Is(err, jetstream.ErrStreamNotFound) || time.Now().After(until) || backoff.Sleep(ctx, formingRetry.Delay(n), nil) != nil {
				break
			}
		}
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
		}
	} else if err != nil {
		return 0, fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
	}
	if cur.Replicas > w.sc.Replicas {
		return 0, &MismatchError{
			Kind: w.kind(), Name: w.name, Setting: "replicas", Component: component, Manager: contract.Manager(w.name),
			Found: fmt.Sprint(cur.Replicas), Want: fmt.Sprint(w.sc.Replicas),
			Fix: fmt.Sprintf("replicas are never lowered on start; start %s with --replicas %d (env SLUICE_REPLICAS), "+
				"or scale down on purpose with `nats stream edit %s --replicas %d` and start again",
				component, cur.Replicas, w.stream(), w.sc.Replicas),
		}
	}
	if cur.Storage != w.sc.Storage {
		return 0, &MismatchError{
			Kind: w.kind(), Name: w.name, Setting: "storage", Component: component, Manager: contract.Manager(w.name),
			Found: cur.Storage.String(), Want: w.sc.Storage.String(),
			Fix: "JetStream cannot change a stream's storage type; start with the storage it has, " +
				"or back up and delete the " + w.kind() + " to recreate it",
		}
	}
	next := w.apply(cur)
	if cur.MaxAge != next.MaxAge {
		held, err := w.keptTTL(ctx, js)
		if err != nil {
			return 0, err
		}
		if held {
			kept = cur.MaxAge
			next.MaxAge, next.Duplicates, next.SubjectDeleteMarkerTTL = cur.MaxAge, cur.Duplicates, cur.SubjectDeleteMarkerTTL
		}
	}
	if reflect.DeepEqual(next, cur) {
		return kept, nil
	}
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return kept, fmt.Errorf("update %s %s (replicas %d → %d): %w%s%s", w.kind(), w.name, cur.Replicas, next.Replicas, err,
			replicasHint(err, w.sc.Replicas), storageHint(err, next))
	}
	return kept, nil
}

// keptTTL reports whether w's TTL must be kept as it is: the leases
// bucket's while its coordinator key holds a lease (a put, not a delete or
// expiry marker). The leader renews by the TTL it found when it took the
// lease; a shorter one set under it would expire its lease between two
// renewals, and a standby would take over while it still ran (issue 38).
// So a coordinator (or an installer) starting beside a leader keeps the
// TTL, and the leader lease in force, until no coordinator leads.
func (w want) keptTTL(ctx context.Context, js jetstream.JetStream) (bool, error) {
	if w.name != contract.BucketLeases {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(cctx, w.name)
	if err == nil {
		_, err = kv.Get(cctx, contract.LeaseCoordinator)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = nats.ErrTimeout
		}
		return false, fmt.Errorf("bucket %s: read the lease %s to tell whether its TTL may change: %w", w.name, contract.LeaseCoordinator, err)
	}
	return true, nil
}

// create creates the bucket or stream; another instance of the manager
// creating it first is fine.
func (w want) create(ctx context.Context, js jetstream.JetStream) error {
	// A cluster that is still forming (servers started together, as by
	// compose or `sluice dev --nats-cluster 3`) refuses an R3 placement
	// until enough peers have joined: wait for them, within formingWait.
	forming := time.Now().Add(formingWait)
	for n := 0; ; n++ {
		err := w.createOnce(ctx, js)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoSuitablePeers || time.Now().After(forming) {
			return err
		}
		if backoff.Sleep(ctx, formingRetry.Delay(n), nil) != nil {
			return err
		}
	}
}

// formingWait bounds the wait for a forming cluster's peers.
const formingWait = 30 * time.Second

// formingRetry: 50 ms to 1 s: peers join and assignments apply within a second or two, all within formingWait.
var formingRetry = backoff.Policy{Base: 50 * time.Millisecond, Cap: time.Second}

// errCodeNoSuitablePeers: "no suitable peers for placement".
const errCodeNoSuitablePeers jetstream.ErrorCode = 10005

func (w want) createOnce(ctx context.Context, js jetstream.JetStream) error {
	var err error
	if w.kv != nil {
		// CreateKeyValue cannot set AllowAtomicPublish; manage's update
		// right after sets it before any batch can be written.
		_, err = js.CreateKeyValue(ctx, *w.kv)
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil
		}
	} else {
		_, err = js.CreateStream(ctx, w.sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("create %s %s with %d replicas: %w%s%s", w.kind(), w.name, w.sc.Replicas, err,
			replicasHint(err, w.sc.Replicas), storageHint(err, w.sc))
	}
	return nil
}

// errCodeReplicasNotSupported: "replicas > 1 not supported in non-clustered mode".
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// replicasHint explains the server's refusal of replicas on a single server.
func replicasHint(err error, replicas int) string {
	var apiErr *jetstream.APIError
	if replicas > 1 && errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported {
		return fmt.Sprintf(": the NATS server is not clustered; use --replicas 1 with a single server, or a cluster of at least %d servers", replicas)
	}
	return ""
}

// Errors of a server that cannot reserve a stream's byte limit.
const (
	errCodeStorageExceeded jetstream.ErrorCode = 10047 // "insufficient storage resources available"
	errCodeMemoryExceeded  jetstream.ErrorCode = 10028 // "insufficient memory resources available"
)

// storageHint explains the server's refusal to reserve a stream's byte
// limit: JetStream reserves MaxBytes on every server holding a replica.
func storageHint(err error, sc jetstream.StreamConfig) string {
	var apiErr *jetstream.APIError
	if sc.MaxBytes <= 0 || !errors.As(err, &apiErr) || (apiErr.ErrorCode != errCodeStorageExceeded && apiErr.ErrorCode != errCodeMemoryExceeded) {
		return ""
	}
	return fmt.Sprintf(": JetStream reserves the stream's byte limit (%d MiB) in the storage of every server that holds a replica; "+
		"give the NATS servers more JetStream storage (jetstream.max_file_store, or a larger volume)", sc.MaxBytes>>20)
}

// manage manages w, retrying while JetStream is not ready (a cluster
// electing its leaders after a restart), and logs a TTL it kept.
func (c openConfig) manage(ctx context.Context, js jetstream.JetStream, w want, component string) error {
	retry := c.retry()
	for attempt := 1; ; attempt++ {
		kept, err := w.manage(ctx, js, component)
		if err == nil && kept != 0 {
			c.log.Info().Str("bucket", w.name).Dur("ttl", kept).Dur("wanted", w.sc.MaxAge).
				Str("reason", "a coordinator holds the lease").
				Msgf("keeping the leader lease %s, the TTL of %s: a coordinator holds the lease and renews by it; "+
					"--leader-lease %s is not used until a %s starts while no coordinator leads",
					kept, w.name, w.sc.MaxAge, contract.Manager(w.name))
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		delay := retry.Next()
		c.log.Info().Str(w.kind(), w.name).Int("attempt", attempt).Dur("retry_in", delay).Err(err).
			Msgf("waiting for JetStream to manage %s %s", w.kind(), w.name)
		if err := backoff.Sleep(ctx, delay, nil); err != nil {
			return fmt.Errorf("%s %s: %w", w.kind(), w.name, err)
		}
	}
}
