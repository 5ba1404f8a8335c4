// sluice's own kinds as custom resources (group SluiceGroup, v1alpha1,
// namespaced): Layer2Network, VRFRoute and RoutingTable, whose spec is the
// intent's spec exactly as `sluice apply -f` reads it (the fields of
// proto/sluice/v1/intent.proto, camelCase). Their CRDs are in the chart,
// deploy/helm/sluice/crds/sluice.dev.yaml, with an OpenAPI schema of the
// same fields (kube_sluice_test.go holds the two together); the
// configurator's validation comes on top, as for every registry.

package registry

import (
	"encoding/json"
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// SluiceGroup is the API group of sluice's own kinds.
const SluiceGroup = "sluice.dev"

// sluiceKind is the kubeKind of sluice's intent kind named kind, served as
// resource.
func sluiceKind(kind, resource string) kubeKind {
	return kubeKind{
		name:       kind,
		gvr:        schema.GroupVersionResource{Group: SluiceGroup, Version: "v1alpha1", Resource: resource},
		namespaced: true,
		status:     true,
		intent: func(name string, spec map[string]any) (*sluicev1.Intent, []string, error) {
			doc, err := json.Marshal(map[string]any{"kind": kind, "name": name, "spec": spec})
			if err != nil {
				return nil, nil, err
			}
			ins, err := intent.Parse("", doc)
			if err != nil {
				return nil, nil, specErrors(err)
			}
			return ins[0], nil, nil
		},
	}
}

// specErrors is the parser's errors without their place in a file: a
// resource is one document, its origin already named.
func specErrors(err error) error {
	var parts []string
	for _, e := range unjoin(err) {
		var pe *intent.ParseError
		if errors.As(e, &pe) {
			if pe.Field != "" {
				parts = append(parts, pe.Field+": "+pe.Msg)
			} else {
				parts = append(parts, pe.Msg)
			}
			continue
		}
		parts = append(parts, e.Error())
	}
	return errors.New(strings.Join(parts, "; "))
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
