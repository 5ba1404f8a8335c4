package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A read that fails is no answer: the harness keeps reading past its
// timeout, and a failure that lasts is its own error, never "busy" (which
// the checker would judge as I2) nor an absent key.
func TestAwait_FailedReadsPastTimeout_NotBusy(t *testing.T) {
	down := errors.New("list rollouts: context deadline exceeded")
	tests := []struct {
		name     string
		polls    []error // in order; nil = the poll reads; then it reads forever
		busy     []string
		want     []string
		wantFail bool
	}{
		{name: "reads at once, calm", want: nil},
		{name: "reads at once, busy past timeout", busy: []string{"node-01 is provisioning"}, want: []string{"node-01 is provisioning"}},
		{name: "reads fail past timeout, then calm", polls: []error{down, down, down, down}, want: nil},
		{name: "reads fail past timeout, then busy", polls: []error{down, down, down}, busy: []string{"rollout x is RUNNING"}, want: []string{"rollout x is RUNNING"}},
		{name: "reads never come back", wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			poll := func(context.Context) ([]string, error) {
				n++
				if n <= len(tt.polls) {
					return nil, tt.polls[n-1]
				}
				if tt.wantFail {
					return nil, down
				}
				return tt.busy, nil
			}
			// Margin: the passing cases return after at most five polls 50ms
			// apart, far within 10s; the failing one ends with ctx
			// (readPatience is a minute), which it cannot outlast. The
			// timeout (1ms) has passed by the second poll.
			bound := 10 * time.Second
			if tt.wantFail {
				bound = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			got, err := await(ctx, time.Millisecond, 1, poll)
			if tt.wantFail {
				if !errors.Is(err, down) || got != nil {
					t.Fatalf("await = %v, %v; want no busy and the read's error", got, err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("await = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// An absent key or an undecodable value is an answer: retry returns it at
// once; a failed read is tried again until it reads.
func TestRetry_AnswersAtOnce_FailuresAgain(t *testing.T) {
	tests := []struct {
		name     string
		errs     []error // per attempt; then nil
		want     error
		attempts int // attempts wanted
	}{
		{name: "reads", want: nil, attempts: 1},
		{name: "absent", errs: []error{jetstream.ErrKeyNotFound}, want: jetstream.ErrKeyNotFound, attempts: 1},
		{name: "undecodable", errs: []error{errUndecodable}, want: errUndecodable, attempts: 1},
		{name: "fails twice, then reads", errs: []error{context.DeadlineExceeded, jetstream.ErrNoStreamResponse}, want: nil, attempts: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			err := retry(context.Background(), func(context.Context) error {
				n++
				if n <= len(tt.errs) {
					return tt.errs[n-1]
				}
				return nil
			})
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) || n != tt.attempts {
				t.Fatalf("retry = %v after %d attempts; want %v after %d", err, n, tt.want, tt.attempts)
			}
		})
	}
}
