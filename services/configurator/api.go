package configurator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

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
