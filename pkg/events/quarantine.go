package events

import (
	"fmt"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TypeValueUnreadable is the one event type for a stored value refused at
// intake, whichever component read it: it does not decode, or it is not
// well-formed for its key (pkg/contract/wellformed). Kind quarantine, id
// <bucket>.<key>; the event's bucket and key fields name the value, the
// reason says why and what the component does instead.
const TypeValueUnreadable = "ValueUnreadable"

// TypeValueRewritten: a component overwrote a refused value with a good one
// (its own key: an agent's status or presence, a content-addressed
// revision). A state transition of its own, so it is reported every time,
// whether or not the refused value was reported before.
const TypeValueRewritten = "ValueRewritten"

// maxQuarantined bounds what a Quarantine remembers: past it the memory is
// cleared, so a flood of foreign values into fresh keys costs a report
// again, never unbounded memory.
const maxQuarantined = 10_000

// Quarantine reports stored values refused at intake (store.ErrUndecodable)
// once per key revision: one ValueUnreadable event and one warning log line. A
// value read again at the same revision — every resync, every pass — is not
// reported again; the same key rewritten with another refused value is.
// Safe for concurrent use.
type Quarantine struct {
	em   *Emitter
	mu   sync.Mutex
	seen map[string]uint64 // "<bucket>/<key>" -> the KV revision reported
}

// NewQuarantine returns a Quarantine that reports through em.
func NewQuarantine(em *Emitter) *Quarantine {
	return &Quarantine{em: em, seen: map[string]uint64{}}
}

// Report reports the value at bucket/key, stored at KV revision rev (0 when
// unknown), refused for cause; doing says what the component does instead
// ("skipped until it is rewritten", "overwrote it with the node's status").
// It returns whether it reported (false: this revision was reported before).
func (q *Quarantine) Report(bucket, key string, rev uint64, cause error, doing string) bool {
	id := bucket + "/" + key
	q.mu.Lock()
	if r, ok := q.seen[id]; ok && r == rev {
		q.mu.Unlock()
		return false
	}
	if len(q.seen) >= maxQuarantined {
		clear(q.seen)
	}
	q.seen[id] = rev
	q.mu.Unlock()
	q.emit(bucket, key, TypeValueUnreadable, func(value, why string) string {
		return fmt.Sprintf("%s is unreadable (%s); %s", value, why, doing)
	}, rev, cause)
	return true
}

// Rewritten reports that the value at bucket/key, refused for cause at KV
// revision rev, was overwritten; with says with what.
func (q *Quarantine) Rewritten(bucket, key string, rev uint64, cause error, with string) {
	q.emit(bucket, key, TypeValueRewritten, func(value, why string) string {
		return fmt.Sprintf("%s held an unreadable value (%s); overwrote it with %s", value, why, with)
	}, rev, cause)
}

// emit publishes one event of type typ about the value at bucket/key, with
// the reason reason makes of "<bucket>/<key> (revision N)" and cause (the
// store's error names bucket and key already: the reason names them once).
func (q *Quarantine) emit(bucket, key, typ string, reason func(value, why string) string, rev uint64, cause error) {
	value := bucket + "/" + key
	why := strings.TrimPrefix(cause.Error(), "decode "+value+": ")
	if rev != 0 {
		value += fmt.Sprintf(" (revision %d)", rev)
	}
	q.em.emit(&sluicev1.Event{
		Kind: KindQuarantine, Id: contract.QuarantineID(bucket, key), Type: typ,
		Bucket: bucket, Key: key, Node: nodeOf(bucket, key), Reason: reason(value, why),
	}, zerolog.WarnLevel)
}

// nodeOf names the node a key belongs to, so that a refused value shows
// among its node's events too; "" for keys of no node.
func nodeOf(bucket, key string) string {
	if contract.IsControlKey(key) {
		return ""
	}
	switch bucket {
	case contract.BucketNodes, contract.BucketStatus:
		return key
	case contract.BucketNodeConfigs:
		if n, _, ok := contract.NodeOfConfigKey(key); ok {
			return n
		}
	}
	return ""
}
