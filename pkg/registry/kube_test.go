package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// crServer is a working in-memory stand-in for the part of a Kubernetes
// API server the registry uses: lists of custom resources over HTTP with
// JSON, in pages (limit and continue), and watches that stay open. A
// resource whose list fails answers a Status of the code given.
type crServer struct {
	mu       sync.Mutex
	items    map[string][]map[string]any // resource (plural) → objects
	fail     map[string]int              // resource → HTTP status of every list
	failNext map[string]int              // resource → status of lists with a continue token
	lists    []string                    // the query of every list, in order
	event    chan struct{}               // a receive sends one event to a watch
}

const dasSchiffPath = "/apis/network.t-caas.telekom.com/v1alpha1/"

func newCRServer(t *testing.T) (*crServer, string) {
	s := &crServer{items: map[string][]map[string]any{}, fail: map[string]int{}, failNext: map[string]int{}, event: make(chan struct{})}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, writeKubeconfig(t, srv.URL)
}

func writeKubeconfig(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q}}]
users: [{name: test, user: {token: t}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *crServer) add(resource, kind, name string, spec map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[resource] = append(s.items[resource], map[string]any{
		"apiVersion": "network.t-caas.telekom.com/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name, "resourceVersion": "1"}, "spec": spec,
	})
}

func (s *crServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	resource, ok := strings.CutPrefix(r.URL.Path, dasSchiffPath)
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.Get("watch") == "true" && s.fail[resource] == 0 {
		s.mu.Unlock()
		defer s.mu.Lock()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-s.event:
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": map[string]any{
				"apiVersion": "network.t-caas.telekom.com/v1alpha1", "kind": "Layer2NetworkConfiguration",
				"metadata": map[string]any{"name": "new", "resourceVersion": "2"}}})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
		return
	}
	if q.Get("watch") != "true" {
		s.lists = append(s.lists, resource+"?"+r.URL.RawQuery)
	}
	code := s.fail[resource]
	if q.Get("continue") != "" && s.failNext[resource] != 0 {
		code = s.failNext[resource]
	}
	if !ok {
		code = http.StatusNotFound
	}
	if code != 0 {
		reason := map[int]string{403: "Forbidden", 404: "NotFound", 410: "Expired"}[code]
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
			"message": "test says " + reason, "reason": reason, "code": code})
		return
	}
	items := s.items[resource]
	from, _ := strconv.Atoi(q.Get("continue"))
	to := len(items)
	if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 && from+limit < to {
		to = from + limit
	}
	meta := map[string]any{"resourceVersion": "1"}
	if to < len(items) {
		meta["continue"] = strconv.Itoa(to)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "network.t-caas.telekom.com/v1alpha1", "kind": "List",
		"metadata": meta, "items": append([]map[string]any{}, items[from:to]...)})
}

func openKube(t *testing.T, k *sluicev1.KubernetesRegistry) registry.Registry {
	t.Helper()
	r, err := registry.Open(&sluicev1.RegistrySpec{Name: "k8s", Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: k}},
		registry.Options{}, zerolog.Nop())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestKube_Fetch_AnswersEveryResourceOfEveryKind(t *testing.T) {
	s, kubeconfig := newCRServer(t)
	s.add("layer2networkconfigurations", "Layer2NetworkConfiguration", "tenant-a", map[string]any{"id": 100, "vni": 10100, "mtu": 1500})
	s.add("vrfrouteconfigurations", "VRFRouteConfiguration", "leak", map[string]any{"vrf": "tenant", "seq": 10,
		"import": []any{map[string]any{"cidr": "10.1.0.0/16", "action": "permit"}}, "export": []any{}, "routeTarget": "65000:1"})
	r := openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig})
	if r.Kind() != "kubernetes" || r.Location() != kubeconfig {
		t.Errorf("kind %q location %q", r.Kind(), r.Location())
	}
	snap := fetch(t, r)
	var origins []string
	for _, d := range snap.Documents {
		origins = append(origins, d.Origin)
	}
	if want := []string{"Layer2NetworkConfiguration/tenant-a", "VRFRouteConfiguration/leak"}; !slices.Equal(origins, want) {
		t.Fatalf("origins %v, want %v", origins, want)
	}
	if d := snap.Documents[0]; d.Err != nil || len(d.Intents) != 1 || d.Intents[0].GetLayer2Network().GetVlan() != 100 {
		t.Errorf("layer2 document %+v", d)
	}
	if d := snap.Documents[1]; len(d.Intents) != 1 || d.Err == nil || !strings.Contains(d.Err.Error(), "spec.routeTarget") {
		t.Errorf("vrf route document %+v: want its intent and spec.routeTarget reported", d)
	}

	again := fetch(t, r)
	if again.Version != snap.Version {
		t.Errorf("the same content gave versions %s and %s", snap.Version, again.Version)
	}
	s.add("layer2networkconfigurations", "Layer2NetworkConfiguration", "tenant-b", map[string]any{"id": 200, "vni": 10200})
	if changed := fetch(t, r); changed.Version == snap.Version || len(changed.Documents) != 3 {
		t.Errorf("a new resource: version %s (was %s), %d documents", changed.Version, snap.Version, len(changed.Documents))
	}
}

func TestKube_Fetch_ReadsEveryPage(t *testing.T) {
	s, kubeconfig := newCRServer(t)
	for i := range 1201 {
		s.add("layer2networkconfigurations", "Layer2NetworkConfiguration", fmt.Sprintf("n%04d", i), map[string]any{"id": 100, "vni": 10100})
	}
	r := openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig, Kinds: []string{"Layer2NetworkConfiguration"}})
	if n := len(fetch(t, r).Documents); n != 1201 {
		t.Fatalf("%d documents, want 1201", n)
	}
	if n := len(s.lists); n != 3 {
		t.Errorf("%d list requests (%v), want 3 pages", n, s.lists)
	}
}

// A list that does not finish is an error, never an empty or partial
// answer: the configurator then changes nothing.
func TestKube_Fetch_FailedListIsAnError(t *testing.T) {
	tests := []struct {
		name     string
		fail     map[string]int
		failNext map[string]int
		pages    bool
		wantErr  string
	}{
		{name: "forbidden", fail: map[string]int{"vrfrouteconfigurations": 403},
			wantErr: "list VRFRouteConfiguration (vrfrouteconfigurations.network.t-caas.telekom.com): forbidden: give the configurator's identity list and watch"},
		{name: "CRD not installed", fail: map[string]int{"layer2networkconfigurations": 404},
			wantErr: "the API server does not serve it: install its CRD"},
		{name: "continue token expired", failNext: map[string]int{"layer2networkconfigurations": 410}, pages: true,
			wantErr: "the list expired before its last page"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, kubeconfig := newCRServer(t)
			n := 1
			if tt.pages {
				n = 600
			}
			for i := range n {
				s.add("layer2networkconfigurations", "Layer2NetworkConfiguration", fmt.Sprintf("n%d", i), map[string]any{"id": 100, "vni": 10100})
			}
			s.fail, s.failNext = tt.fail, tt.failNext
			if s.fail == nil {
				s.fail = map[string]int{}
			}
			if s.failNext == nil {
				s.failNext = map[string]int{}
			}
			r := openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig})
			snap, err := r.Fetch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
			if snap.Documents != nil {
				t.Errorf("an error came with documents %v", snap.Documents)
			}
		})
	}
}

func TestKube_Fetch_UnreachableOrUnreadableIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	r := openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: writeKubeconfig(t, url)})
	if _, err := r.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "list Layer2NetworkConfiguration") {
		t.Errorf("unreachable server: err %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	r = openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: missing})
	if _, err := r.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "kubeconfig "+missing) {
		t.Errorf("missing kubeconfig: err %v", err)
	}
}

func TestKube_Check_NamesTheField(t *testing.T) {
	tests := []struct {
		name    string
		given   *sluicev1.KubernetesRegistry
		wantErr string
	}{
		{name: "in-cluster, every kind", given: &sluicev1.KubernetesRegistry{}},
		{name: "a kubeconfig and a kind in any case", given: &sluicev1.KubernetesRegistry{Kubeconfig: "/etc/k", Kinds: []string{"vrfrouteconfiguration"}}},
		{name: "relative kubeconfig", given: &sluicev1.KubernetesRegistry{Kubeconfig: "k"},
			wantErr: `kubernetes.kubeconfig: "k" is not an absolute path`},
		{name: "bad namespace", given: &sluicev1.KubernetesRegistry{Namespace: "Net_Ops"},
			wantErr: "kubernetes.namespace: "},
		{name: "namespace of cluster-scoped kinds", given: &sluicev1.KubernetesRegistry{Namespace: "net"},
			wantErr: "kubernetes.namespace: Layer2NetworkConfiguration and VRFRouteConfiguration are cluster-scoped; leave the namespace out"},
		{name: "unknown kind", given: &sluicev1.KubernetesRegistry{Kinds: []string{"Layer2NetworkConfiguration", "NodeNetworkConfig"}},
			wantErr: `kubernetes.kinds[1]: NodeNetworkConfig is not a kind sluice reads: Layer2NetworkConfiguration, VRFRouteConfiguration`},
		{name: "a kind twice", given: &sluicev1.KubernetesRegistry{Kinds: []string{"VRFRouteConfiguration", "vrfRouteConfiguration"}},
			wantErr: "kubernetes.kinds[1]: VRFRouteConfiguration is given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := registry.Check(&sluicev1.RegistrySpec{Name: "k8s", Source: &sluicev1.RegistrySpec_Kubernetes{Kubernetes: tt.given}})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// Changed follows a watch of each kind; a kind whose watch is refused is
// named in the note, and its changes are seen at the sync interval.
func TestKube_Changed_WatchNudgesAndARefusedWatchIsNoted(t *testing.T) {
	s, kubeconfig := newCRServer(t)
	s.fail["vrfrouteconfigurations"] = 403
	r := openKube(t, &sluicev1.KubernetesRegistry{Kubeconfig: kubeconfig})
	changed := r.Changed()
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(r.Note(), "watch VRFRouteConfiguration") {
		if time.Now().After(deadline) {
			t.Fatalf("note %q, want it to name the refused watch", r.Note())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.Note(); !strings.Contains(n, "changes are seen at the next sync interval") || strings.Contains(n, "Layer2NetworkConfiguration") {
		t.Errorf("note %q: want only the refused kind, seen at the sync interval", n)
	}
	select {
	case s.event <- struct{}{}: // the Layer2NetworkConfiguration watch takes it
	case <-time.After(waitFor):
		t.Fatal("no watch of Layer2NetworkConfiguration")
	}
	select {
	case <-changed:
	case <-time.After(waitFor):
		t.Fatal("an event of the watch did not nudge")
	}
}
