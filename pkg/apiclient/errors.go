package apiclient

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The errors a call returns, in one place. The configurator's answer is an
// *Error (match with errors.As): branch on its Code. Before anything
// reaches a configurator, ErrRequestTooLarge and ErrNoConfigurator (match
// with errors.Is); anything else is the request's encoding, the
// connection's or the context's.

// Error is an error answer from the configurator.
type Error struct {
	Code        contract.ErrCode       // what to branch on: contract.ErrCodeInvalid, ErrCodeConflict, …
	Description string                 // one line saying what went wrong
	FieldErrors []*sluicev1.FieldError // every problem, when a batch failed validation
	Findings    []*sluicev1.Finding    // the fleet verifier's findings, when it refused the apply
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configurator: %s", e.Description)
	for _, fe := range e.FieldErrors {
		b.WriteString("\n  ")
		b.WriteString(intent.FormatFieldError(fe))
	}
	for _, f := range e.Findings {
		b.WriteString("\n  ")
		b.WriteString(contract.EscapeLine(verify.Format(f)))
	}
	return b.String()
}

// ErrRequestTooLarge matches (errors.Is) the error returned, before
// anything is sent, for a request larger than the server's max payload.
var ErrRequestTooLarge = errors.New("request too large")

// ErrNoConfigurator matches (errors.Is) the error returned when no
// configurator answers on the connection's server.
var ErrNoConfigurator = errors.New("no configurator is running")
