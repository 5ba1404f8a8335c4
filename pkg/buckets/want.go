package buckets

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
)

// want is one bucket or stream and the stream config it should have.
type want struct {
	name string                    // bucket or stream name
	kv   *jetstream.KeyValueConfig // nil for a plain stream
	sc   jetstream.StreamConfig    // the fields sluice manages (see apply)
}

func (w want) kind() string {
	if w.kv != nil {
		return "bucket"
	}
	return "stream"
}

func (w want) stream() string {
	if w.kv != nil {
		return contract.StreamOfBucket(w.name)
	}
	return w.name
}

// wants lists every bucket and then the events stream with its wanted config.
func wants(s contract.Settings) []want {
	var out []want
	for _, cfg := range s.BucketConfigs() {
		out = append(out, want{name: cfg.Bucket, kv: &cfg, sc: kvStreamConfig(cfg)})
	}
	return append(out, want{name: contract.StreamEvents, sc: s.EventsStreamConfig()})
}

// kvStreamConfig is the part of a KV bucket's stream config sluice manages,
// computed as nats.go's CreateKeyValue does, plus atomic publish.
func kvStreamConfig(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	return jetstream.StreamConfig{
		Description:            cfg.Description,
		MaxMsgsPerSubject:      int64(max(cfg.History, 1)),
		MaxAge:                 cfg.TTL,
		Duplicates:             dup,
		Storage:                cfg.Storage,
		Replicas:               max(cfg.Replicas, 1),
		RePublish:              cfg.RePublish,
		AllowMsgTTL:            cfg.LimitMarkerTTL != 0,
		SubjectDeleteMarkerTTL: cfg.LimitMarkerTTL,
		AllowAtomicPublish:     contract.AllowsAtomicPublish(cfg.Bucket),
	}
}

// apply returns cur with the fields sluice manages taken from w.
func (w want) apply(cur jetstream.StreamConfig) jetstream.StreamConfig {
	next := cur
	next.Description = w.sc.Description
	next.MaxAge = w.sc.MaxAge
	next.Replicas = w.sc.Replicas
	if w.kv != nil {
		next.MaxMsgsPerSubject = w.sc.MaxMsgsPerSubject
		next.Duplicates = w.sc.Duplicates
		next.RePublish = w.sc.RePublish
		next.AllowMsgTTL = w.sc.AllowMsgTTL || cur.AllowMsgTTL // the server cannot turn it off
		next.SubjectDeleteMarkerTTL = w.sc.SubjectDeleteMarkerTTL
		next.AllowAtomicPublish = w.sc.AllowAtomicPublish
	} else {
		next.Subjects = w.sc.Subjects
		next.Discard = w.sc.Discard
		next.MaxBytes = w.sc.MaxBytes
		// A byte limit an operator raised on purpose (nats stream edit
		// --max-bytes) is kept: lowering it would drop the oldest events.
		// A stream without a limit (-1, as created before there was one)
		// gets the limit.
		if cur.MaxBytes > 0 && (w.sc.MaxBytes <= 0 || cur.MaxBytes > w.sc.MaxBytes) {
			next.MaxBytes = cur.MaxBytes
		}
	}
	return next
}

// verify checks what a binding component relies on: at least the replicas
// and the durability of storage it was started with. (The nodes TTL is not
// checked: an agent takes it as it finds it, Buckets.NodeLease.) (Atomic publish, where the
// coordinator fences writes, is waited for: see waitFor.)
func (w want) verify(cur jetstream.StreamConfig, component string) error {
	mismatch := func(setting, found, want, fix string) error {
		return &MismatchError{Kind: w.kind(), Name: w.name, Setting: setting, Found: found, Want: want,
			Component: component, Manager: contract.Manager(w.name), Fix: fix}
	}
	mgr := contract.Manager(w.name)
	if cur.Replicas < w.sc.Replicas {
		return mismatch("replicas", fmt.Sprint(cur.Replicas), fmt.Sprintf("at least %d", w.sc.Replicas),
			fmt.Sprintf("start %s with --replicas %d so that it scales the %s up, or start %s with --replicas %d",
				mgr, w.sc.Replicas, w.kind(), component, cur.Replicas))
	}
	if w.sc.Storage == jetstream.FileStorage && cur.Storage != jetstream.FileStorage {
		return mismatch("storage", cur.Storage.String(), w.sc.Storage.String(),
			"the "+w.kind()+" keeps nothing across a server restart; recreate it with file storage")
	}
	return nil
}
