// Package kubenode reads and watches the labels of one Kubernetes Node, so
// that an agent running in a DaemonSet can publish its Node's labels as its
// sluice labels. Entry points: NewClient builds a client (in-cluster, or from
// a kubeconfig file), Watch sends the Node's labels, first as they are and
// then on every change, and says when the Node is deleted and created
// again.
//
// Watch lists and watches that one Node only (a field selector on its name),
// so 10,000 agents cost the API server 10,000 single-object watches, not
// 10,000 watches of every Node. The agent's ServiceAccount needs get, list
// and watch on nodes (the helm chart's ClusterRole grants exactly that).
package kubenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/sluicehq/sluice/pkg/logging"
)

// userAgent names sluice in the API server's audit log.
const userAgent = "sluice-kubenode"

// NewClient returns a Kubernetes client: with kubeconfig "" the in-cluster
// configuration of the pod's ServiceAccount, else the current context of
// the kubeconfig file at that path (for running outside a cluster and for
// tests). It makes no request.
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes in-cluster config: %w (run in a pod with a ServiceAccount, or give a kubeconfig file)", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	cfg.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// Node is what Watch knows of the Node: its labels, and whether it was
// deleted (Labels are then the last it had: an empty set would select the
// node out of every intent).
type Node struct {
	Labels  map[string]string
	Deleted bool
}

// Watch sends the Node named node on the returned channel: as it is first,
// then again each time its label set changes or it is deleted or created
// again. A value is never sent twice in a row, and a slow reader only ever
// gets the newest (values it had no time to read are skipped). The channel
// is closed when ctx ends. The maps are the reader's own.
//
// Watch reads the Node once before returning, so a wrong node name
// (ErrNodeNotFound) or missing RBAC (ErrForbidden) is an error at start,
// not a log line. Afterwards it follows the Node with an informer: a watch
// that ends or expires ("resource version too old") is re-established, and
// the Node listed again, with backoff by client-go's reflector; failures are
// logged on log, client-go's own lines included. A deleted Node is sent
// with Deleted set and its last labels (the agent withdraws the node from
// sluice: it left); when a Node of that name is created again it is sent
// with its labels.
func Watch(ctx context.Context, client kubernetes.Interface, node string, log zerolog.Logger) (<-chan Node, error) {
	if node == "" {
		return nil, errors.New("kubenode: no node name given")
	}
	log = log.With().Str(logging.FieldNode, node).Logger()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read node %s: %w: the node name must be the Kubernetes Node's (spec.nodeName)", node, ErrNodeNotFound)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("read node %s: %w: %w (grant get, list and watch on nodes to the agent's ServiceAccount)", node, ErrForbidden, err)
	case err != nil:
		return nil, fmt.Errorf("read node %s: %w", node, err)
	}

	w := &watcher{node: node, log: log, notify: make(chan struct{}, 1), out: make(chan Node)}
	w.observe(n)

	informer := cache.NewSharedIndexInformer(listWatch(client, node), &corev1.Node{}, 0, cache.Indexers{})
	if err := informer.SetWatchErrorHandlerWithContext(w.watchError); err != nil {
		return nil, fmt.Errorf("watch node %s: %w", node, err)
	}
	if _, err := informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj) },
		UpdateFunc: func(_, obj any) { w.observe(obj) },
		DeleteFunc: w.gone,
	}, cache.HandlerOptions{}); err != nil {
		return nil, fmt.Errorf("watch node %s: %w", node, err)
	}
	// client-go logs through the context's logger: keep its lines on log.
	go informer.RunWithContext(klog.NewContext(ctx, newLogr(log)))
	go w.send(ctx)
	return w.out, nil
}

// listWatch lists and watches the one Node named node.
func listWatch(client kubernetes.Interface, node string) cache.ListerWatcher {
	byName := fields.OneTermEqualSelector(metav1.ObjectNameField, node).String()
	nodes := client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return nodes.Watch(ctx, o)
		},
	}
	// Lets the reflector know whether client can stream its initial list
	// (the fake clientset of the tests cannot).
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// watcher turns the informer's events into Node values on out.
type watcher struct {
	node   string
	log    zerolog.Logger
	notify chan struct{} // capacity 1: "latest changed"
	out    chan Node

	mu      sync.Mutex
	latest  map[string]string // the newest labels seen; nil until the first
	deleted bool              // the Node is gone (latest are its last labels)
}

// observe takes the labels of a Node object the informer delivered.
func (w *watcher) observe(obj any) {
	n, ok := obj.(*corev1.Node)
	// The field selector already asks for this node only; the check keeps
	// a server (or fake) that ignores it from mixing other Nodes in.
	if !ok || n.Name != w.node {
		return
	}
	w.mu.Lock()
	changed := w.deleted || w.latest == nil || !maps.Equal(w.latest, n.Labels)
	if w.deleted {
		w.deleted = false
		w.log.Info().Msg("kubernetes node created again")
	}
	if changed {
		w.latest = cloneLabels(n.Labels)
	}
	w.mu.Unlock()
	if changed {
		w.changed()
	}
}

// changed tells send that the newest value changed.
func (w *watcher) changed() {
	select {
	case w.notify <- struct{}{}:
	default: // a notification is pending; send reads the newest
	}
}

// gone records that the Node was deleted; its last labels are kept.
func (w *watcher) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); !ok || n.Name != w.node {
		return
	}
	w.mu.Lock()
	was := w.deleted
	w.deleted = true
	w.mu.Unlock()
	if was {
		return
	}
	w.log.Warn().Str(logging.FieldReason, "node deleted").
		Msg("kubernetes node deleted: the node leaves sluice until a Node of this name is created again")
	w.changed()
}

// send delivers the newest value to out until ctx ends, skipping values
// replaced before they were read and values equal to the last one sent.
func (w *watcher) send(ctx context.Context) {
	defer close(w.out)
	var (
		sent, pending Node
		sentAny       bool
		havePending   bool
	)
	for {
		var out chan Node // nil: nothing to send
		if havePending {
			out = w.out
		}
		select {
		case <-ctx.Done():
			return
		case <-w.notify:
			w.mu.Lock()
			pending = Node{Labels: cloneLabels(w.latest), Deleted: w.deleted}
			w.mu.Unlock()
			havePending = !sentAny || sent.Deleted != pending.Deleted || !maps.Equal(sent.Labels, pending.Labels)
		case out <- pending:
			sent, sentAny, havePending = pending, true, false
			pending = Node{}
		}
	}
}

// watchError logs why the informer's list or watch failed; the reflector
// retries with backoff by itself.
func (w *watcher) watchError(_ context.Context, _ *cache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		w.log.Debug().Err(err).Msg("kubernetes node watch closed; watching again")
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		w.log.Info().Err(err).Msg("kubernetes node watch expired; listing again")
	case apierrors.IsForbidden(err):
		w.log.Error().Err(err).Msg("not allowed to list or watch nodes: grant get, list and watch on nodes to the agent's ServiceAccount; retrying")
	default:
		w.log.Warn().Err(err).Msg("kubernetes node watch failed; retrying")
	}
}

// cloneLabels copies labels; never nil, so a Node without labels sends an
// empty set.
func cloneLabels(labels map[string]string) map[string]string {
	c := make(map[string]string, len(labels))
	maps.Copy(c, labels)
	return c
}
