package configurator

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Every value the configurator stores is one NATS message, so it must fit
// the server's max_payload. Applies check every value they will write
// against it before writing any (refusing, not chunking: see
// docs/intents.md, "Apply and crash consistency"). A request is bounded
// before that: it is one message too, and carries at most
// intent.MaxIntentsPerApply intents ("Apply limits").
const (
	// headroom is what a KV write carries besides its value: the subject
	// and the compare-and-set headers take well under 200 bytes.
	headroom = 4 << 10
	// maxListedErrors bounds the field errors in one reply; the reply's
	// description still counts them all.
	maxListedErrors = 100
	// maxNamesInReason bounds how many intent IDs a head reason or an event
	// names before "(+N more)".
	maxNamesInReason = 10
)

// maxValue is the largest value the configurator writes: the connection's
// max payload less headroom.
func (s *Service) maxValue() int {
	return int(s.cfg.Conn.MaxPayload()) - headroom
}

// fits returns a *tooLargeError when v, encoded as it is stored, is larger
// than maxValue.
func (s *Service) fits(what string, v proto.Message) error {
	b, err := store.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", what, err)
	}
	if limit := s.maxValue(); len(b) > limit {
		return &tooLargeError{what: what, size: len(b), limit: limit, maxPayload: s.cfg.Conn.MaxPayload()}
	}
	return nil
}

// someIDs joins the first maxNamesInReason ids, then "(+N more)".
func someIDs(ids []string) string {
	if len(ids) <= maxNamesInReason {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:maxNamesInReason], ", ") + " (+" + contract.Thousands(len(ids)-maxNamesInReason) + " more)"
}

// andMore joins the listed of total nodes a refusal names, then "; and N
// more" for those it leaves out (maxRefusedListed).
func andMore(listed []string, total int) string {
	out := strings.Join(listed, "; ")
	if n := total - len(listed); n > 0 {
		out += fmt.Sprintf("; and %d more", n)
	}
	return out
}

// checkFits refuses an apply when a value it would write does not fit in
// one message: an intent, the revision or the journal, in that order.
func (s *Service) checkFits(journal *sluicev1.ApplyJournal, writes, set []*sluicev1.Intent, target string) error {
	now := timestamppb.New(s.cfg.Now())
	var err error
	for _, in := range writes {
		if err = s.fits("intent "+intent.ID(in), &sluicev1.StoredIntent{Intent: in, Source: journal.GetSource(), UpdatedAt: now}); err != nil {
			break
		}
	}
	if err == nil {
		err = s.fits("the revision ("+contract.Plural(len(set), "intent")+")", &sluicev1.Revision{Id: target, Intents: set, CreatedAt: now})
	}
	if err == nil {
		err = s.fits("the apply journal ("+contract.Plural(len(journal.GetIntents()), "intent")+" and "+
			contract.Plural(len(journal.GetPrior()), "prior value")+")", journal)
	}
	var tooLarge *tooLargeError
	if errors.As(err, &tooLarge) {
		return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf(
			"refused: %v; nothing was stored. Apply fewer or smaller intents in one request, or raise max_payload on the NATS server", err)}
	}
	if err != nil {
		return unavailable(err)
	}
	return nil
}
