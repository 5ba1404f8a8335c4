package store

import (
	"context"
	"fmt"
	"reflect"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Direct returns a copy of s whose Create and Update are sent over nc as
// one request each, as the KV client sends them — a message on the key's
// subject with the expected last revision in its header, so the server
// stores it only while the key is at that revision — but without the KV
// and JetStream clients' per-publish options, and with the server's
// acknowledgement read by hand (decodePubAck). It is for a hot writer: an
// agent writes two statuses per change of its node. A create over a key
// whose last message is a delete marker, which needs that marker's
// revision, falls back to the KV client after the first refusal. nc must
// be the connection of the JetStream context the bucket was bound with,
// and the bucket must take writes on its own subjects ($KV.<bucket>.<key>:
// no JetStream domain or API prefix), as the Batcher assumes too.
//
// Only the KV client's own bucket handle is bypassed: over any other
// jetstream.KeyValue (a test's fault injection wraps one) s is returned
// as it is, and the wrapper keeps seeing every write.
func (s *Store[T]) Direct(nc *nats.Conn) *Store[T] {
	if nc == nil || !clientKV(s.kv) {
		return s
	}
	c := *s
	c.nc = nc
	return &c
}

// clientKV reports whether kv is one of the KV client's own bucket handles
// (its unexported type, from the package that defines the interface).
func clientKV(kv jetstream.KeyValue) bool {
	t := reflect.TypeOf(kv)
	if t == nil || t.Kind() != reflect.Pointer {
		return false
	}
	return t.Elem().PkgPath() == reflect.TypeFor[jetstream.KeyValue]().PkgPath()
}

// headerExpectedLastSubjectSeq is the header a compare-and-set names the
// key's revision in.
const headerExpectedLastSubjectSeq = "Nats-Expected-Last-Subject-Sequence"

// put stores value at key if key's revision is rev (0: it has none) and
// returns the new revision.
func (s *Store[T]) put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	m := &nats.Msg{
		Subject: "$KV." + s.kv.Bucket() + "." + key,
		Header:  nats.Header{headerExpectedLastSubjectSeq: []string{strconv.FormatUint(rev, 10)}},
		Data:    value,
	}
	ack, reply, err := requestPubAck(ctx, s.nc, m)
	if err != nil {
		return 0, err
	}
	if e := ack.Error; e != nil {
		if e.ErrCode == errCodeWrongLastSeq || e.ErrCode == errCodeWrongLastSeqConstant {
			return 0, fmt.Errorf("%s: %w", e.Description, errDirectConflict)
		}
		return 0, e.apiError()
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("bad reply %q: no sequence", reply)
	}
	return ack.Seq, nil
}
