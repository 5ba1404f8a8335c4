// Package apiclient calls the configurator's API (apply, delete) over NATS
// request-reply, for the CLI and tests. Requests and responses are the
// protojson of sluicev1.ApplyRequest/ApplyResponse and
// DeleteRequest/DeleteResponse on contract.SubjectApply and SubjectDelete.
package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// DefaultTimeout bounds a request whose context has no deadline.
const DefaultTimeout = 30 * time.Second

// Apply stores a batch of intents, all or nothing. A rejected batch returns
// an *Error with code contract.ErrCodeInvalid and every FieldError.
//
// A request without a RequestId gets a fresh one, set in req: sending the
// same req again (after a timeout, when the first may have landed) is then
// answered with what the first did (resp.Replayed) instead of applying twice.
func Apply(ctx context.Context, nc *nats.Conn, req *sluicev1.ApplyRequest) (*sluicev1.ApplyResponse, error) {
	if req.GetRequestId() == "" {
		req.RequestId = nuid.Next()
	}
	resp := &sluicev1.ApplyResponse{}
	if err := call(ctx, nc, contract.SubjectApply, req, resp); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return resp, nil
}

// Delete marks an intent for deletion; the next revision leaves it out.
func Delete(ctx context.Context, nc *nats.Conn, req *sluicev1.DeleteRequest) (*sluicev1.DeleteResponse, error) {
	resp := &sluicev1.DeleteResponse{}
	if err := call(ctx, nc, contract.SubjectDelete, req, resp); err != nil {
		return nil, fmt.Errorf("delete %s/%s: %w", intent.KeyToken(req.GetKind()), req.GetName(), err)
	}
	return resp, nil
}

// Undo makes an earlier revision's intents the head again (see
// sluicev1.UndoRequest). Like Apply, it sets a fresh RequestId if none.
func Undo(ctx context.Context, nc *nats.Conn, req *sluicev1.UndoRequest) (*sluicev1.UndoResponse, error) {
	if req.GetRequestId() == "" {
		req.RequestId = nuid.Next()
	}
	resp := &sluicev1.UndoResponse{}
	if err := call(ctx, nc, contract.SubjectUndo, req, resp); err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	return resp, nil
}

// Retry rolls the head out again after its rollout rolled back, was aborted
// or partially failed. Like Apply, it sets a fresh RequestId if none.
func Retry(ctx context.Context, nc *nats.Conn, req *sluicev1.RetryRequest) (*sluicev1.RetryResponse, error) {
	if req.GetRequestId() == "" {
		req.RequestId = nuid.Next()
	}
	resp := &sluicev1.RetryResponse{}
	if err := call(ctx, nc, contract.SubjectRetry, req, resp); err != nil {
		return nil, fmt.Errorf("retry: %w", err)
	}
	return resp, nil
}

func call(ctx context.Context, nc *nats.Conn, subject string, req, resp proto.Message) error {
	body, err := protojson.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	if max := nc.MaxPayload(); max > 0 && int64(len(body)) > max {
		return fmt.Errorf("%w: it is %s bytes, over the NATS server's max_payload of %s bytes; nothing was sent: send fewer intents per request, or raise max_payload on the server",
			ErrRequestTooLarge, contract.Thousands(len(body)), contract.Thousands(int(max)))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w on %s: start it, or `sluice dev` for a local control plane", ErrNoConfigurator, nc.ConnectedUrlRedacted())
	}
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		e := &Error{Code: contract.ErrCode(code), Description: msg.Header.Get(micro.ErrorHeader)}
		if len(msg.Data) > 0 {
			// Validation failures carry an ApplyResponse listing every field error.
			var data sluicev1.ApplyResponse
			if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(msg.Data, &data) == nil {
				e.FieldErrors, e.Findings = data.GetErrors(), data.GetFindings()
			}
		}
		return e
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}

// WaitReady waits until a configurator answers the micro ping on nc, or ctx
// ends. Call it before the first Apply of a freshly started system.
func WaitReady(ctx context.Context, nc *nats.Conn) error {
	// 20 ms to 500 ms: a configurator starting takes a few hundred ms; one that does not answer is not asked 50 times a second.
	retry := backoff.New(backoff.Policy{Base: 20 * time.Millisecond, Cap: 500 * time.Millisecond})
	for {
		err := Ready(ctx, nc)
		if err == nil {
			return nil
		}
		if retry.Wait(ctx) != nil {
			return fmt.Errorf("no configurator answered on %s: %w", nc.ConnectedUrlRedacted(), err)
		}
	}
}

// apiSubjects are the configurator's endpoints a client may call.
var apiSubjects = []string{contract.SubjectApply, contract.SubjectDelete, contract.SubjectUndo, contract.SubjectRetry}

// Ready asks once whether a configurator serves every endpoint of its API:
// its micro service answers pings as soon as it is added, before its
// endpoints are, so the service's INFO must list them all.
func Ready(ctx context.Context, nc *nats.Conn) error {
	subject, err := micro.ControlSubject(micro.InfoVerb, contract.ConfiguratorService, "")
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	reply, err := nc.RequestWithContext(rctx, subject, nil)
	if err != nil {
		return err
	}
	var info micro.Info
	if err := json.Unmarshal(reply.Data, &info); err != nil {
		return fmt.Errorf("configurator info: %w", err)
	}
	for _, want := range apiSubjects {
		if !slices.ContainsFunc(info.Endpoints, func(e micro.EndpointInfo) bool { return e.Subject == want }) {
			return fmt.Errorf("the configurator does not serve %s yet", want)
		}
	}
	return nil
}
