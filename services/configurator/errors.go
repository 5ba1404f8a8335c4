package configurator

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The errors of the configurator, in one place. A request answers with an
// *apiError: its code (contract.ErrCode*) is what a client branches on,
// its description what a person reads. The other types are causes, matched
// with errors.As: finishing a journal rolls the apply back on those that
// retrying does not cure (cannotComplete), and the answer's code follows
// the cause (rolledBack, interrupted).

// apiError is an answer with a micro error code (contract.ErrCode*). When
// fieldErrors or findings are set, the answer's data is an ApplyResponse
// listing them, so a client can show every problem and not only the summary.
type apiError struct {
	code        contract.ErrCode
	desc        string
	fieldErrors []*sluicev1.FieldError
	findings    []*sluicev1.Finding // the fleet verifier's, when it refused (verify.go)
}

func (e *apiError) Error() string { return string(e.code) + " " + e.desc }

// invalid rejects a request whose content breaks the rules; nothing was
// stored. The answer lists the first maxListedErrors problems and its
// description counts them all, so that it always fits in a reply.
func invalid(what string, errs []*sluicev1.FieldError) *apiError {
	desc := fmt.Sprintf("%s with %s; nothing was stored", contract.Plural(len(errs), "problem"), what)
	if len(errs) > maxListedErrors {
		desc += fmt.Sprintf(" (the first %d are listed)", maxListedErrors)
		errs = errs[:maxListedErrors]
	}
	return &apiError{code: contract.ErrCodeInvalid, desc: desc, fieldErrors: errs}
}

// unavailable: the control plane failed before anything was committed.
func unavailable(err error) *apiError {
	return &apiError{code: contract.ErrCodeUnavailable, desc: fmt.Sprintf("control plane unavailable, nothing was changed; retry: %v", err)}
}

// rolledBack: the apply was journaled but could not complete, and was
// rolled back; the stored intents are as they were.
func rolledBack(cause error) *apiError {
	code := contract.ErrCodeConflict
	var tooLarge *tooLargeError
	var inv *invalidStateError
	if errors.As(cause, &tooLarge) || errors.As(cause, &inv) || errors.Is(cause, nats.ErrMaxPayload) {
		code = contract.ErrCodeInvalid
	}
	return &apiError{code: code, desc: fmt.Sprintf("the apply could not complete and was rolled back; nothing was changed: %v", cause)}
}

// interrupted: the control plane failed after the change was committed to
// the journal; it completes (or is rolled back) on the next apply or start.
func interrupted(err error) *apiError {
	var inv *invalidStateError
	if errors.As(err, &inv) {
		return invalid("the stored intents", inv.errs)
	}
	var tooLarge *tooLargeError
	if errors.As(err, &tooLarge) {
		return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf("refused: %v; the head stays where it is", err)}
	}
	if errors.Is(err, store.ErrConflict) {
		return &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf("state changed during the request; retry: %v", err)}
	}
	return &apiError{code: contract.ErrCodeUnavailable, desc: fmt.Sprintf(
		"control plane failed during the change; it is recorded and completes, or is rolled back, when the configurator next applies or starts: %v", err)}
}

// inForceUnknown: a stored intent is unreadable and the version of it in
// force cannot be read either (keepInForce), so no revision is cut. It is
// the apiError an apply answers with; a reconcile keeps the head where it is.
type inForceUnknown struct{ api *apiError }

func (e *inForceUnknown) Error() string { return e.api.Error() }

func (e *inForceUnknown) Unwrap() error { return e.api }

// invalidStateError: the effective set in the intents bucket breaks the
// rules, so no revision is cut from it.
type invalidStateError struct{ errs []*sluicev1.FieldError }

func (e *invalidStateError) Error() string {
	return fmt.Sprintf("the stored intents break %d rules", len(e.errs))
}

// changedSinceError: an intent the journal would write was changed by
// someone else after the apply read it, so completing the apply would
// overwrite that change.
type changedSinceError struct{ id string }

func (e *changedSinceError) Error() string {
	return fmt.Sprintf("intent %s changed since the apply read it", e.id)
}

// jsMessageTooLarge is JetStream's "message size exceeds maximum allowed"
// (JSStreamMessageExceedsMaximumErr): a stream's max_msg_size refused a write.
const jsMessageTooLarge jetstream.ErrorCode = 10054

// cannotComplete reports whether err from finishing an apply is one that
// retrying does not cure, so the apply must be rolled back. Anything else
// (a timeout, a lost connection) keeps the journal for the next attempt.
// An unreadable intent whose version in force cannot be read
// (inForceUnknown) is one: what would cure it (an apply or delete of that
// intent, the repair of the head's revision) waits for the journal.
func cannotComplete(err error) bool {
	var (
		tooLarge *tooLargeError
		inv      *invalidStateError
		changed  *changedSinceError
		unknown  *inForceUnknown
		apiErr   *jetstream.APIError
	)
	return errors.As(err, &tooLarge) || errors.As(err, &inv) || errors.As(err, &changed) || errors.As(err, &unknown) ||
		errors.Is(err, nats.ErrMaxPayload) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jsMessageTooLarge)
}

// tooLargeError: a value would not fit in one NATS message.
type tooLargeError struct {
	what        string // "the revision (10,500 intents)", "intent routingtable/a"
	size, limit int
	maxPayload  int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%s would be %s bytes stored, over the limit of %s bytes for one value (the NATS server's max_payload %s less %s for headers)",
		e.what, contract.Thousands(e.size), contract.Thousands(e.limit), contract.Thousands(int(e.maxPayload)), contract.Thousands(headroom))
}
