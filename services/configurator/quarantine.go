package configurator

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// unreadable reports a stored value that does not decode, with an event and
// an error log naming bucket and key, the cause and what the configurator
// does instead (doing). Each value is reported once per evType, not on
// every read: a key is reported again only when it holds a new revision.
func (s *Service) unreadable(bucket, key string, rev uint64, cause error, kind, evType, doing string) {
	id := bucket + "/" + key
	s.reportedMu.Lock()
	seen := id + " " + evType // what is done about a value is reported once each
	if s.reported[seen] == rev && rev != 0 {
		s.reportedMu.Unlock()
		return
	}
	s.reported[seen] = rev
	s.reportedMu.Unlock()
	s.log.Error().Err(cause).Str(logging.FieldBucket, bucket).Str(logging.FieldKey, key).Uint64("kv_revision", rev).
		Str(logging.FieldReason, doing).Msg("stored value does not decode")
	// The store's error names bucket and key already; the reason names them once.
	why := strings.TrimPrefix(cause.Error(), "decode "+id+": ")
	s.events.Emit(&sluicev1.Event{Kind: kind, Id: key, Type: evType,
		Reason: fmt.Sprintf("%s (revision %d) is unreadable (%s); %s", id, rev, why, doing)})
}
