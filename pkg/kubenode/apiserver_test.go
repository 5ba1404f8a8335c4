package kubenode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicehq/sluice/pkg/kubenode"
)

// apiServer is a working in-memory stand-in for the part of the Kubernetes
// API the package uses: get, list and watch of Nodes over HTTP with JSON.
// It records the field selector of every list and watch.
type apiServer struct {
	mu        sync.Mutex
	nodes     map[string]*corev1.Node
	rv        int
	watchers  map[chan []byte]string // → the watch's field selector
	selectors []string               // fieldSelector of each list and watch, in order
}

func newAPIServer(t *testing.T, nodes ...*corev1.Node) (*apiServer, string) {
	s := &apiServer{nodes: map[string]*corev1.Node{}, watchers: map[chan []byte]string{}}
	for _, n := range nodes {
		s.rv++
		n.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		n.ResourceVersion = strconv.Itoa(s.rv)
		s.nodes[n.Name] = n
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q}}]
users: [{name: test, user: {token: t}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, kubeconfig
}

func (s *apiServer) setLabels(name string, labels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name].DeepCopy()
	s.rv++
	n.Labels, n.ResourceVersion = labels, strconv.Itoa(s.rv)
	s.nodes[name] = n
	ev, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": n})
	for w, sel := range s.watchers {
		if sel == "" || sel == "metadata.name="+name {
			w <- ev
		}
	}
}

func (s *apiServer) fieldSelectors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.selectors...)
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	q := r.URL.Query()
	switch {
	case r.URL.Path == "/api/v1/nodes" && q.Get("watch") == "true":
		s.watch(w, r)
	case r.URL.Path == "/api/v1/nodes":
		s.mu.Lock()
		s.selectors = append(s.selectors, q.Get("fieldSelector"))
		list := corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
		for _, n := range s.nodes {
			if q.Get("fieldSelector") == "" || q.Get("fieldSelector") == "metadata.name="+n.Name {
				list.Items = append(list.Items, *n)
			}
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(list)
	case len(r.URL.Path) > len("/api/v1/nodes/"):
		s.mu.Lock()
		n, ok := s.nodes[r.URL.Path[len("/api/v1/nodes/"):]]
		s.mu.Unlock()
		if !ok {
			status(w, http.StatusNotFound, "NotFound")
			return
		}
		_ = json.NewEncoder(w).Encode(n)
	default:
		status(w, http.StatusNotFound, "NotFound")
	}
}

// watch streams events until the client goes. Like an API server without
// the WatchList feature, it refuses a watch that asks for initial events
// (client-go then lists instead).
func (s *apiServer) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("sendInitialEvents") != "" {
		status(w, http.StatusUnprocessableEntity, "Invalid")
		return
	}
	events := make(chan []byte, 16)
	s.mu.Lock()
	s.selectors = append(s.selectors, q.Get("fieldSelector"))
	s.watchers[events] = q.Get("fieldSelector")
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, events)
		s.mu.Unlock()
	}()
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-events:
			_, _ = w.Write(append(ev, '\n'))
			w.(http.Flusher).Flush()
		}
	}
}

func status(w http.ResponseWriter, code int, reason string) {
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason)})
}

// Over HTTP, through a client from a kubeconfig: the current labels, a
// change, and only ever the one Node asked for (a field selector on its
// name in every list and watch, never all Nodes).
func TestWatch_OverHTTP_WatchesOnlyItsNode(t *testing.T) {
	api, kubeconfig := newAPIServer(t,
		testNode("node-01", map[string]string{"zone": "a"}),
		testNode("node-02", map[string]string{"zone": "b"}))
	client, err := kubenode.NewClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := kubenode.Watch(ctx, client, "node-01", zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, map[string]string{"zone": "a"})

	waitFor(t, "a watch", func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.watchers) > 0
	})
	api.setLabels("node-02", map[string]string{"zone": "c"})
	api.setLabels("node-01", map[string]string{"zone": "a", "rack": "r1"})
	expect(t, ch, map[string]string{"zone": "a", "rack": "r1"})

	sel := api.fieldSelectors()
	if len(sel) < 2 {
		t.Fatalf("requests %v: want a list and a watch", sel)
	}
	for _, s := range sel {
		if s != "metadata.name=node-01" {
			t.Errorf("a list or watch with fieldSelector %q, want metadata.name=node-01 on every one (all: %q)", s, sel)
		}
	}

	if _, err := kubenode.Watch(ctx, client, "node-09", zerolog.Nop()); err == nil {
		t.Error("Watch of a node the API server does not have: no error")
	}
}
