package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
)

// This file writes several keys of one bucket as a JetStream atomic batch
// (nats-server ≥ 2.12, stream setting AllowAtomicPublish): every write is
// compare-and-set, and the whole batch lands or nothing does. A fence makes
// the batch conditional on another key too: the leader's term.

// Op is one write of a batch: Value at Key if Key's revision is still
// Revision (0: the key must not exist), or a delete when Value is nil.
type Op struct {
	Key      string
	Value    proto.Message
	Revision uint64
}

// Fence makes a batch conditional on key Key of the same bucket still being
// at revision Revision: a new leader rewrites its term's fence, so a deposed
// leader's batches fail on the server. Check names the throwaway key the
// fence check is written to (it carries no data; keys starting with "_" are
// control keys, see contract.IsControlKey).
type Fence struct {
	Key      string
	Check    string
	Revision uint64
}

// Errors the server gives for a failed expected-sequence check.
const (
	errCodeWrongLastSeq         = 10071
	errCodeWrongLastSeqConstant = 10164
	errCodeAtomicDisabled       = 10174
)

// Batcher writes atomic batches into one bucket.
type Batcher struct {
	nc     *nats.Conn
	bucket string
}

// NewBatcher returns a Batcher for bucket over nc. The bucket's stream must
// allow atomic publish.
func NewBatcher(nc *nats.Conn, bucket string) *Batcher { return &Batcher{nc: nc, bucket: bucket} }

// apiError is a JetStream API error in a reply.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// apiError is e as nats.go's error type, so that its code stays matchable
// (AsStorageError, errors.As).
func (e *apiError) apiError() *jetstream.APIError {
	return &jetstream.APIError{Code: e.Code, ErrorCode: jetstream.ErrorCode(e.ErrCode), Description: e.Description}
}

type pubAck struct {
	Error *apiError `json:"error,omitempty"`
	Seq   uint64    `json:"seq"`
}

func (b *Batcher) subject(key string) string { return "$KV." + b.bucket + "." + key }

// msgOf is op as a KV message: its value, or a delete marker.
func (b *Batcher) msgOf(op Op) (*nats.Msg, error) {
	m := nats.NewMsg(b.subject(op.Key))
	if op.Value == nil {
		m.Header.Set("KV-Operation", "DEL")
		return m, nil
	}
	data, err := Marshal(op.Value)
	if err != nil {
		return nil, fmt.Errorf("encode %s/%s: %w", b.bucket, op.Key, err)
	}
	m.Data = data
	return m, nil
}

// expect makes m conditional on key's last revision being rev.
func (b *Batcher) expect(m *nats.Msg, key string, rev uint64) {
	m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(rev, 10))
	if m.Subject != b.subject(key) {
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", b.subject(key))
	}
}

// request sends m (within AttemptTimeout unless ctx ends sooner) and
// decodes the JSON reply into v.
func (b *Batcher) request(ctx context.Context, m *nats.Msg, v any) error {
	ctx, cancel := attempt(ctx)
	defer cancel()
	reply, err := b.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(reply.Data, v); err != nil {
		return fmt.Errorf("bad reply %q: %w", reply.Data, err)
	}
	return nil
}

// requestPubAck publishes m over nc as a request and reads the server's
// acknowledgement (decodePubAck), returning the reply as well: the
// Batcher's writes and a Direct store's.
func requestPubAck(ctx context.Context, nc *nats.Conn, m *nats.Msg) (pubAck, []byte, error) {
	var ack pubAck
	reply, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return ack, nil, err
	}
	if err := decodePubAck(reply.Data, &ack); err != nil {
		return ack, reply.Data, fmt.Errorf("bad reply %q: %w", reply.Data, err)
	}
	return ack, reply.Data, nil
}

// decodePubAck reads the server's answer to a publish. A plain
// acknowledgement, {"stream":"KV_x","seq":N} (perhaps with "domain" or
// "duplicate"), is read by hand: the coordinator writes one per node it
// starts. Anything else — an error above all — goes through encoding/json.
func decodePubAck(data []byte, ack *pubAck) error {
	if seq, ok := plainAckSeq(data); ok {
		*ack = pubAck{Seq: seq}
		return nil
	}
	return json.Unmarshal(data, ack)
}

// plainAckSeq is the "seq" of an acknowledgement without an "error"; ok
// is false for anything it does not recognise.
func plainAckSeq(data []byte) (uint64, bool) {
	const key = `"seq":`
	if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' || bytes.Contains(data, []byte(`"error"`)) {
		return 0, false
	}
	i := bytes.Index(data, []byte(key))
	if i < 0 || bytes.Index(data[i+len(key):], []byte(key)) >= 0 {
		return 0, false
	}
	rest := data[i+len(key):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n < len(rest) && rest[n] != ',' && rest[n] != '}' {
		return 0, false
	}
	seq, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	return seq, err == nil
}

// publish sends m and returns the sequence it was stored at; a failed
// expected-sequence check matches ErrConflict.
func (b *Batcher) publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	ctx, cancel := attempt(ctx)
	defer cancel()
	ack, _, err := requestPubAck(ctx, b.nc, m)
	if err != nil {
		return 0, explain(err)
	}
	if e := ack.Error; e != nil {
		if se := AsStorageError(e.apiError()); se != nil {
			return 0, fmt.Errorf("%w: %w", se, ErrBatchRejected)
		}
		switch e.ErrCode {
		case errCodeWrongLastSeq:
			return 0, fmt.Errorf("%s: %w", e.Description, ErrConflict)
		case errCodeWrongLastSeqConstant:
			return 0, fmt.Errorf("%s: %w: %w", e.Description, ErrConflict, ErrInFlight)
		case errCodeAtomicDisabled:
			return 0, fmt.Errorf("the bucket's stream does not allow atomic publish (its managing service upgrades it): %w", ErrBatchRejected)
		}
		return 0, fmt.Errorf("%s (%d): %w", e.Description, e.ErrCode, ErrBatchRejected)
	}
	return ack.Seq, nil
}

// Write writes ops (and the fence check, when fence is set) as one atomic
// batch and returns each op's new revision. On a failed compare-and-set it
// returns an error matching ErrConflict; nothing was written.
func (b *Batcher) Write(ctx context.Context, ops []Op, fence *Fence) ([]uint64, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	revs, err := whileInFlight(ctx, func() ([]uint64, error) { return b.write(ctx, ops, fence) })
	observe(ctx, b.bucket, err)
	return revs, err
}

// whileInFlight runs send again while the server refuses it because another
// write checking the same key is in flight (ErrInFlight): on a cluster only
// one write per checked key may be between proposal and apply, so the
// writes of one leader that all check its fence take turns. It gives up
// after AttemptTimeout with the last error.
func whileInFlight[T any](ctx context.Context, send func() (T, error)) (T, error) {
	deadline := time.Now().Add(AttemptTimeout)
	for n := 0; ; n++ {
		v, err := send()
		if err == nil || !errors.Is(err, ErrInFlight) || time.Now().After(deadline) {
			return v, err
		}
		// Jittered, so that writers that collided do not collide again.
		if serr := backoff.Sleep(ctx, inFlightRetry.Delay(n), nil); serr != nil {
			return v, err
		}
	}
}

// inFlightRetry: 1 ms to 20 ms: the write in the way is applied within milliseconds; the leader's writes keep flowing.
var inFlightRetry = backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond}

func (b *Batcher) write(ctx context.Context, ops []Op, fence *Fence) ([]uint64, error) {
	msgs := make([]*nats.Msg, 0, len(ops)+1)
	for _, op := range ops {
		m, err := b.msgOf(op)
		if err != nil {
			return nil, err
		}
		b.expect(m, op.Key, op.Revision)
		msgs = append(msgs, m)
	}
	if fence != nil {
		m := nats.NewMsg(b.subject(fence.Check))
		b.expect(m, fence.Key, fence.Revision)
		msgs = append(msgs, m)
	}
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := b.nc.PublishMsg(m); err != nil {
				return nil, fmt.Errorf("write batch to %s: %w", b.bucket, err)
			}
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set("Nats-Batch-Commit", "1")
	seq, err := b.publish(ctx, last)
	if err != nil {
		return nil, fmt.Errorf("write batch to %s (%s): %w", b.bucket, keysOf(ops), err)
	}
	// A batch is stored contiguously, ending at the acknowledged sequence.
	revs := make([]uint64, len(ops))
	first := seq - uint64(len(msgs)) + 1
	for i := range ops {
		revs[i] = first + uint64(i)
	}
	return revs, nil
}

// WriteFenced writes one op as a single message whose only condition is the
// fence: it lands only while fence.Key is still at fence.Revision. It is
// the cheap form for a key that only the fence holder writes, in order
// (op.Revision is not checked): an atomic batch stages every batch in a
// store of its own on the server, which costs a file store and an fsync per
// write on a single server with file storage.
func (b *Batcher) WriteFenced(ctx context.Context, op Op, fence *Fence) (uint64, error) {
	m, err := b.msgOf(op)
	if err != nil {
		return 0, err
	}
	b.expect(m, fence.Key, fence.Revision)
	rev, err := whileInFlight(ctx, func() (uint64, error) { return b.publish(ctx, m) })
	observe(ctx, b.bucket, err)
	if err != nil {
		return 0, fmt.Errorf("write %s/%s (fenced on %s): %w", b.bucket, op.Key, fence.Key, err)
	}
	return rev, nil
}

// LastRevision returns the revision of key's last message, including a
// delete or purge marker (0 when the key never existed): the revision a
// compare-and-set over a deleted key must name.
func (b *Batcher) LastRevision(ctx context.Context, key string) (uint64, error) {
	rev, _, err := b.Last(ctx, key)
	return rev, err
}

// Last returns the revision of key's last message and whether the key is
// live (that message is a value, not a delete or purge marker; false when
// the key never existed), as the stream's leader has it: unlike a direct
// get, which any replica may answer, possibly one still catching up, and
// unlike a key listing, which may end early under concurrent writes.
func (b *Batcher) Last(ctx context.Context, key string) (rev uint64, live bool, err error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": b.subject(key)})
	m := nats.NewMsg("$JS.API.STREAM.MSG.GET.KV_" + b.bucket)
	m.Data = req
	var resp struct {
		Error   *apiError `json:"error,omitempty"`
		Message struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
	}
	if _, err := read(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.request(ctx, m, &resp) }); err != nil {
		return 0, false, fmt.Errorf("last revision of %s/%s: %w", b.bucket, key, err)
	}
	if e := resp.Error; e != nil {
		if e.ErrCode == errCodeNoMessageFound {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("last revision of %s/%s: %s (%d)", b.bucket, key, e.Description, e.ErrCode)
	}
	h := string(resp.Message.Hdrs)
	marker := strings.Contains(h, "KV-Operation: DEL") || strings.Contains(h, "KV-Operation: PURGE") || strings.Contains(h, "Nats-Marker-Reason:")
	return resp.Message.Seq, !marker, nil
}

// errCodeNoMessageFound is JetStream's "no message found".
const errCodeNoMessageFound = 10037

func keysOf(ops []Op) string {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	return strings.Join(keys, ", ")
}
