package configurator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The API: serve adds one micro endpoint a verb (contract.SubjectApply,
// SubjectDelete, SubjectUndo, SubjectRetry), each the one handler handle
// of its verb. A request is protojson; the answer is the verb's response
// as protojson, or its *apiError (errors.go) as a micro error carrying a
// contract.ErrCode (respond).

// serve starts the API: the micro service and one endpoint a verb, each
// held until the registries' first syncs (whenReady) and while the control
// plane is paused (gated). The caller stops the service.
func (s *Service) serve(ctx context.Context) (micro.Service, error) {
	svc, err := micro.AddService(s.cfg.Conn, micro.Config{
		Name:        contract.ConfiguratorService,
		Version:     contract.ServiceVersion(s.cfg.Version),
		Metadata:    map[string]string{"instance": s.cfg.Instance, "build": s.cfg.Version},
		Description: "sluice configurator: apply, delete, undo and retry",
	})
	if err != nil {
		return nil, fmt.Errorf("start API: %w", err)
	}
	for _, ep := range []struct {
		name, subject string
		handle        func(context.Context, micro.Request)
	}{
		{"apply", contract.SubjectApply, handle(s, "apply", s.apply)},
		{"delete", contract.SubjectDelete, handle(s, "delete", s.delete)},
		{"undo", contract.SubjectUndo, handle(s, "undo", s.undo)},
		{"retry", contract.SubjectRetry, handle(s, "retry", s.retry)},
	} {
		h := s.whenReady(ep.name, s.gated(ep.name, ep.handle))
		if err := svc.AddEndpoint(ep.name, micro.ContextHandler(ctx, h), micro.WithEndpointSubject(ep.subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("start API endpoint %s: %w", ep.name, err)
		}
	}
	s.log.Info().Str("apply", contract.SubjectApply).Str("delete", contract.SubjectDelete).Str("undo", contract.SubjectUndo).
		Str("retry", contract.SubjectRetry).Msg("serving the configurator API")
	return svc, nil
}

// handle is the handler of verb op: it decodes the request (a Req, as
// protojson), calls verb within requestTimeout and answers with the
// response or the error (respond).
func handle[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](s *Service, op string, verb func(context.Context, PReq) (Resp, error)) func(context.Context, micro.Request) {
	return func(ctx context.Context, r micro.Request) {
		req := PReq(new(Req))
		if err := decodeRequest(r.Data(), req); err != nil {
			s.respond(r, op, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		resp, err := verb(ctx, req)
		s.respond(r, op, resp, err)
	}
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
	lvl.Str("op", op).Str("code", string(ae.code)).Int("problems", len(ae.fieldErrors)+len(ae.findings)).Msg(desc)
	if rerr := r.Error(string(ae.code), desc, data); rerr != nil {
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

// whenReady holds a request until every registry had its first sync
// attempt, at most bootstrapWait; then it is answered 503 with nothing
// stored.
func (s *Service) whenReady(op string, h func(context.Context, micro.Request)) func(context.Context, micro.Request) {
	return func(ctx context.Context, r micro.Request) {
		select {
		case <-s.ready:
		default:
			t := time.NewTimer(bootstrapWait)
			defer t.Stop()
			select {
			case <-s.ready:
			case <-t.C:
				s.respond(r, op, nil, &apiError{code: contract.ErrCodeUnavailable, desc: fmt.Sprintf(
					"the configurator is starting: the first sync of its registries did not finish within %s (sluice get registries); nothing was stored; retry",
					bootstrapWait)})
				return
			case <-ctx.Done():
				return
			}
		}
		h(ctx, r)
	}
}
