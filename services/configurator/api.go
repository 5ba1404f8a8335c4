package configurator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// apiError is an answer with a micro error code (contract.ErrCode*). When
// fieldErrors or findings are set, the answer's data is an ApplyResponse
// listing them, so a client can show every problem and not only the summary.
type apiError struct {
	code        string
	desc        string
	fieldErrors []*sluicev1.FieldError
	findings    []*sluicev1.Finding // the fleet verifier's, when it refused (verify.go)
}

func (e *apiError) Error() string { return e.code + " " + e.desc }

// invalid rejects a request whose content breaks the rules; nothing was
// stored. The answer lists the first maxListedErrors problems and its
// description counts them all, so that it always fits in a reply.
func invalid(what string, errs []*sluicev1.FieldError) *apiError {
	desc := fmt.Sprintf("%s with %s; nothing was stored", plural(len(errs), "problem"), what)
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

func (s *Service) handleApply(ctx context.Context, r micro.Request) {
	req := &sluicev1.ApplyRequest{}
	if err := decodeRequest(r.Data(), req); err != nil {
		s.respond(r, "apply", nil, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.apply(ctx, req)
	s.respond(r, "apply", resp, err)
}

func (s *Service) handleDelete(ctx context.Context, r micro.Request) {
	req := &sluicev1.DeleteRequest{}
	if err := decodeRequest(r.Data(), req); err != nil {
		s.respond(r, "delete", nil, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.delete(ctx, req)
	s.respond(r, "delete", resp, err)
}

func (s *Service) handleUndo(ctx context.Context, r micro.Request) {
	req := &sluicev1.UndoRequest{}
	if err := decodeRequest(r.Data(), req); err != nil {
		s.respond(r, "undo", nil, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.undo(ctx, req)
	s.respond(r, "undo", resp, err)
}

func (s *Service) handleRetry(ctx context.Context, r micro.Request) {
	req := &sluicev1.RetryRequest{}
	if err := decodeRequest(r.Data(), req); err != nil {
		s.respond(r, "retry", nil, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := s.retry(ctx, req)
	s.respond(r, "retry", resp, err)
}

var protoErrPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*`)

// decodeRequest reads a protojson request, rejecting unknown fields so that
// a typo in a hand-written request is not silently ignored.
func decodeRequest(data []byte, m proto.Message) error {
	name := string(m.ProtoReflect().Descriptor().Name())
	if len(data) == 0 {
		return &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf("empty request: send a %s as protojson", name)}
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return &apiError{code: contract.ErrCodeInvalid,
			desc: fmt.Sprintf("malformed %s: %s", name, protoErrPrefix.ReplaceAllString(err.Error(), ""))}
	}
	return nil
}

// maxDescription bounds the one-line description of an error reply.
const maxDescription = 4 << 10

func (s *Service) respond(r micro.Request, op string, resp proto.Message, err error) {
	if err == nil {
		b, merr := s.encodeReply(op, resp)
		if merr == nil {
			if rerr := r.Respond(b); rerr != nil {
				s.log.Warn().Err(rerr).Str("op", op).Msg("send response")
			}
			return
		}
		err = fmt.Errorf("encode response: %w", merr)
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = unavailable(err)
	}
	// A header value is one line, and the whole reply fits in one message.
	desc := strings.Join(strings.Fields(strings.ReplaceAll(ae.desc, "\n", "; ")), " ")
	if len(desc) > maxDescription {
		desc = strings.ToValidUTF8(desc[:maxDescription], "") + " …"
	}
	var data []byte
	listed, found := ae.fieldErrors, ae.findings
	for len(listed)+len(found) > 0 {
		data, _ = protojson.Marshal(&sluicev1.ApplyResponse{Errors: listed, Findings: found})
		if len(data)+len(desc) <= s.maxValue() {
			break
		}
		listed, found, data = listed[:len(listed)/2], found[:len(found)/2], nil
	}
	lvl := s.log.Info()
	if ae.code == contract.ErrCodeUnavailable {
		lvl = s.log.Warn()
	}
	lvl.Str("op", op).Str("code", ae.code).Int("problems", len(ae.fieldErrors)+len(ae.findings)).Msg(desc)
	if rerr := r.Error(ae.code, desc, data); rerr != nil {
		s.log.Warn().Err(rerr).Str("op", op).Msg("send error response")
	}
}

// encodeReply encodes a success reply. An apply's lists of intents are no
// larger than its request, which fit in a message; should they not fit,
// the lists are dropped rather than the reply.
func (s *Service) encodeReply(op string, resp proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(resp)
	if err != nil || len(b) <= s.maxValue() {
		return b, err
	}
	ar, ok := resp.(*sluicev1.ApplyResponse)
	if !ok {
		return b, nil
	}
	s.log.Warn().Str("op", op).Int("bytes", len(b)).Msg("reply too large for one message: sending it without the lists of intents")
	short := proto.Clone(ar).(*sluicev1.ApplyResponse)
	short.Created, short.Updated, short.Unchanged = nil, nil, nil
	return protojson.Marshal(short)
}
