package configurator

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
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

// plural is "1 intent", "2 intents", "1,000 intents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return contract.Thousands(n) + " " + noun + "s"
}
