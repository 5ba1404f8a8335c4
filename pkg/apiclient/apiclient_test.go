package apiclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestApply_NoConfiguratorRunning_SaysSoWithTheURL(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	_, err := apiclient.Apply(context.Background(), env.Conn, &sluicev1.ApplyRequest{})
	if !errors.Is(err, apiclient.ErrNoConfigurator) {
		t.Fatalf("error = %v, want ErrNoConfigurator", err)
	}
	if !strings.Contains(err.Error(), "no configurator is running on "+env.URL) {
		t.Errorf("error %q does not name the server %s", err, env.URL)
	}
}

// A stand-in configurator answers with a micro error carrying field errors.
func TestApply_MicroErrorBecomesTypedErrorWithFieldErrors(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	data, err := store.Marshal(&sluicev1.ApplyResponse{Errors: []*sluicev1.FieldError{
		{Intent: "layer2network/a", Field: "spec.vlan", Rule: "5000 is outside 1-4094"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := micro.AddService(env.Conn, micro.Config{Name: "fake", Version: "0.0.1", Endpoint: &micro.EndpointConfig{
		Subject: contract.SubjectApply,
		Handler: micro.HandlerFunc(func(r micro.Request) { _ = r.Error(string(contract.ErrCodeInvalid), "1 problem with the batch", data) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // margin: returns with the answer
	defer cancel()
	_, err = apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{})
	var ae *apiclient.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v, want *apiclient.Error", err)
	}
	if ae.Code != "400" || ae.Description != "1 problem with the batch" || len(ae.FieldErrors) != 1 || ae.FieldErrors[0].GetField() != "spec.vlan" {
		t.Errorf("error = %+v", ae)
	}
	if !strings.Contains(err.Error(), "layer2network/a: spec.vlan: 5000 is outside 1-4094") {
		t.Errorf("message does not list the field error: %q", err)
	}
}

func TestApply_RequestOverMaxPayload_IsNotSentAndSaysWhy(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	max := env.Conn.MaxPayload()
	in := &sluicev1.Intent{Name: "big", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{
		TableId: 7, NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"k": strings.Repeat("v", int(max))}},
	}}}
	got := 0
	sub, err := env.Conn.Subscribe(contract.SubjectApply, func(*nats.Msg) { got++ })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	_, err = apiclient.Apply(context.Background(), env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{in}})

	if !errors.Is(err, apiclient.ErrRequestTooLarge) || !strings.Contains(err.Error(), "max_payload") || !strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("error = %v, want ErrRequestTooLarge naming max_payload", err)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if got != 0 {
		t.Errorf("%d requests reached the subject, want none", got)
	}
}
