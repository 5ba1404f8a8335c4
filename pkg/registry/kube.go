// Kubernetes registry: intents read from custom resources on a Kubernetes
// API server, with the dynamic client (unstructured objects: no generated
// types, no controller-runtime).
//
// # Kinds
//
// das-schiff-network-operator's Layer2NetworkConfiguration and
// VRFRouteConfiguration (group network.t-caas.telekom.com, v1alpha1,
// cluster-scoped), mapped field by field to Layer2Network and VRFRoute
// (kube_dasschiff.go), are read when the spec names no kinds; sluice's own
// Layer2Network, VRFRoute and RoutingTable (group sluice.dev, v1alpha1,
// namespaced; kube_sluice.go) when it names them. Every kind read needs
// its CRD installed. Each resource is a Document whose Origin is
// kind/name (kind/namespace/name for a namespaced kind) and whose one intent
// is named by the resource's metadata.name.
//
// # Reading and watching
//
// Fetch lists every kind (pages of kubeListPage) and answers only when all
// lists finished: a list that fails — the server unreachable, the
// credentials forbidden, a page's continue token expired (410 Gone), a CRD
// not installed (404) — is an error naming the kind, never an empty or
// partial answer. The kubeconfig file is read at every Fetch, so a rotated
// token is used at the next one. Changed follows a watch of each kind; a
// watch that fails is set up again after kubeWatchRetry, and Note says
// which kinds are then seen only at the sync interval. The only writes are
// the status of sluice's own kinds after a sync (kube_status.go).

package registry

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const (
	// kubeListPage is the page size of a list: a few hundred resources of
	// a few hundred bytes each per request.
	kubeListPage = 500
	// kubeWatchRetry is the wait before watching again a kind whose watch
	// failed or ended with an error.
	kubeWatchRetry = 3 * time.Second
	// kubeUserAgent names the configurator in the API server's audit log.
	kubeUserAgent = "sluice-configurator"
)

// kubeKind is one kind of custom resource the registry reads.
type kubeKind struct {
	name       string // "Layer2NetworkConfiguration"
	gvr        schema.GroupVersionResource
	namespaced bool
	// status: the CRD has a status subresource sluice writes
	// (kube_status.go); das-schiff's has none with fields.
	status bool
	// intent maps a resource's spec to an intent named name, with the
	// fields it could not carry; an error refuses the resource.
	intent func(name string, spec map[string]any) (*sluicev1.Intent, []string, error)
}

// kubeKinds are the kinds sluice reads, in the order they are listed.
var kubeKinds = []kubeKind{
	{
		name: "Layer2NetworkConfiguration",
		gvr:  schema.GroupVersionResource{Group: DasSchiffGroup, Version: "v1alpha1", Resource: "layer2networkconfigurations"},
		intent: func(name string, spec map[string]any) (*sluicev1.Intent, []string, error) {
			l, unmapped, err := mapLayer2NetworkConfiguration(spec)
			if err != nil {
				return nil, nil, err
			}
			return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: l}}, unmapped, nil
		},
	},
	{
		name: "VRFRouteConfiguration",
		gvr:  schema.GroupVersionResource{Group: DasSchiffGroup, Version: "v1alpha1", Resource: "vrfrouteconfigurations"},
		intent: func(name string, spec map[string]any) (*sluicev1.Intent, []string, error) {
			v, unmapped, err := mapVRFRouteConfiguration(spec)
			if err != nil {
				return nil, nil, err
			}
			return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: v}}, unmapped, nil
		},
	},
	sluiceKind("Layer2Network", "layer2networks"),
	sluiceKind("VRFRoute", "vrfroutes"),
	sluiceKind("RoutingTable", "routingtables"),
}

// defaultKubeKinds are the kinds read when a spec names none: das-schiff's,
// whose CRDs a das-schiff cluster has.
var defaultKubeKinds = kubeKinds[:2]

// KubeKinds are the names of the kinds a Kubernetes registry can read.
func KubeKinds() []string { return kindNames(kubeKinds) }

// DefaultKubeKinds are the names of the kinds read when a spec names none.
func DefaultKubeKinds() []string { return kindNames(defaultKubeKinds) }

func kindNames(kinds []kubeKind) []string {
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k.name)
	}
	return out
}

// kubeRegistry reads intents from custom resources.
type kubeRegistry struct {
	*changeWatch
	kubeconfig string // "" = in-cluster
	namespace  string // "" = every namespace (namespaced kinds only)
	kinds      []kubeKind

	client func() (dynamic.Interface, error) // newKubeClient; tests give a fake

	mu        sync.Mutex
	unwatch   map[string]string   // kind → why its watch is down
	seen      map[string]kubeSeen // origin → the resource the last Fetch listed (kinds with a status)
	statusErr string              // why the last Report failed; "" when it did not
}

// checkKube checks a Kubernetes registry spec.
func checkKube(spec *sluicev1.KubernetesRegistry) error {
	if p := spec.GetKubeconfig(); p != "" && !filepath.IsAbs(p) {
		return fmt.Errorf("kubernetes.kubeconfig: %q is not an absolute path (leave it out for the in-cluster configuration)", p)
	}
	if ns := spec.GetNamespace(); ns != "" {
		if err := contract.ValidName(ns); err != nil {
			return fmt.Errorf("kubernetes.namespace: %w", err)
		}
	}
	kinds, err := selectKubeKinds(spec.GetKinds())
	if err != nil {
		return err
	}
	if spec.GetNamespace() != "" && !slices.ContainsFunc(kinds, func(k kubeKind) bool { return k.namespaced }) {
		names := kindNames(kinds)
		return fmt.Errorf("kubernetes.namespace: %s %s cluster-scoped; leave the namespace out",
			strings.Join(names, " and "), map[bool]string{true: "is", false: "are"}[len(names) == 1])
	}
	return nil
}

// selectKubeKinds is the kinds names selects (any case), das-schiff's
// when none.
func selectKubeKinds(names []string) ([]kubeKind, error) {
	if len(names) == 0 {
		return defaultKubeKinds, nil
	}
	var out []kubeKind
	for i, n := range names {
		j := slices.IndexFunc(kubeKinds, func(k kubeKind) bool { return strings.EqualFold(k.name, n) })
		switch {
		case j < 0:
			return nil, fmt.Errorf("kubernetes.kinds[%d]: %s is not a kind sluice reads: %s", i, contract.Quote(n), strings.Join(KubeKinds(), ", "))
		case slices.ContainsFunc(out, func(k kubeKind) bool { return k.name == kubeKinds[j].name }):
			return nil, fmt.Errorf("kubernetes.kinds[%d]: %s is given twice", i, kubeKinds[j].name)
		}
		out = append(out, kubeKinds[j])
	}
	return out, nil
}

// openKube returns the registry of spec. It makes no request and reads no
// file: the kubeconfig is read by each Fetch.
func openKube(spec *sluicev1.KubernetesRegistry, log zerolog.Logger) (Registry, error) {
	if err := checkKube(spec); err != nil {
		return nil, err
	}
	kinds, _ := selectKubeKinds(spec.GetKinds())
	r := &kubeRegistry{kubeconfig: spec.GetKubeconfig(), namespace: spec.GetNamespace(), kinds: kinds, unwatch: map[string]string{}}
	r.client = r.newClient
	r.changeWatch = newChangeWatch(log.With().Str("location", r.Location()).Logger(), r.watch)
	return r, nil
}

func (r *kubeRegistry) Kind() string { return "kubernetes" }

// Location is the kubeconfig's path or "in-cluster", and the namespace.
func (r *kubeRegistry) Location() string {
	return KubeLocation(&sluicev1.KubernetesRegistry{Kubeconfig: r.kubeconfig, Namespace: r.namespace})
}

// KubeLocation is where a Kubernetes registry of spec reads: its
// kubeconfig's path or "in-cluster", with the namespace when one is given.
func KubeLocation(spec *sluicev1.KubernetesRegistry) string {
	loc := "in-cluster"
	if p := spec.GetKubeconfig(); p != "" {
		loc = p
	}
	if ns := spec.GetNamespace(); ns != "" {
		loc += " namespace " + ns
	}
	return loc
}

// Note says which watches are down and whether status writes fail.
func (r *kubeRegistry) Note() string { return joinNotes(r.changeWatch.Note(), r.statusNote()) }

// Close stops the watches. It is safe to call twice.
func (r *kubeRegistry) Close() error {
	r.stop()
	return nil
}

// newClient reads the kubeconfig (or the in-cluster configuration) and
// returns a dynamic client. It makes no request.
func (r *kubeRegistry) newClient() (dynamic.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if r.kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("kubernetes in-cluster config: %w (run the configurator in a pod with a ServiceAccount, or give --kubeconfig)", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", r.kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", r.kubeconfig, err)
	}
	cfg.UserAgent = kubeUserAgent
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

func (r *kubeRegistry) resource(client dynamic.Interface, k kubeKind) dynamic.ResourceInterface {
	if k.namespaced && r.namespace != "" {
		return client.Resource(k.gvr).Namespace(r.namespace)
	}
	return client.Resource(k.gvr)
}

// Fetch lists every kind and maps each resource. Any list that fails is an
// error and no snapshot.
func (r *kubeRegistry) Fetch(ctx context.Context) (Snapshot, error) {
	client, err := r.client()
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Documents: []Document{}}
	seen := map[string]kubeSeen{}
	for _, k := range r.kinds {
		items, err := r.list(ctx, client, k)
		if err != nil {
			return Snapshot{}, err
		}
		for i := range items {
			doc := kubeDocument(k, &items[i])
			snap.Documents = append(snap.Documents, doc)
			if k.status {
				seen[doc.Origin] = seenOf(k, &items[i])
			}
		}
	}
	r.mu.Lock()
	r.seen = seen
	r.mu.Unlock()
	slices.SortFunc(snap.Documents, func(a, b Document) int { return strings.Compare(a.Origin, b.Origin) })
	d := newDigest()
	for _, doc := range snap.Documents {
		d.add(doc.Origin)
		for _, in := range doc.Intents {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(in)
			if err != nil {
				return Snapshot{}, fmt.Errorf("encode the intent of %s: %w", doc.Origin, err)
			}
			d.add(string(b))
		}
		if doc.Err != nil {
			d.add(doc.Err.Error())
		}
	}
	snap.Version = d.String()
	return snap, nil
}

// list lists every resource of kind k, page by page.
func (r *kubeRegistry) list(ctx context.Context, client dynamic.Interface, k kubeKind) ([]unstructured.Unstructured, error) {
	res := r.resource(client, k)
	opts := metav1.ListOptions{Limit: kubeListPage}
	var items []unstructured.Unstructured
	for {
		page, err := res.List(ctx, opts)
		if err != nil {
			return nil, kubeListError(k, err)
		}
		items = append(items, page.Items...)
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			return items, nil
		}
	}
}

// kubeListError says what a failed list of k means and what to do.
func kubeListError(k kubeKind, err error) error {
	what := fmt.Sprintf("list %s (%s)", k.name, k.gvr.GroupResource())
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: the API server does not serve it: install its CRD (kubectl get crd %s): %w", what, k.gvr.GroupResource(), err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: forbidden: give the configurator's identity list and watch on %s: %w", what, k.gvr.GroupResource(), err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the API server does not accept the credentials: %w", what, err)
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return fmt.Errorf("%s: the list expired before its last page; the next sync lists again: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// kubeDocument maps one resource of kind k.
func kubeDocument(k kubeKind, obj *unstructured.Unstructured) Document {
	origin := k.name + "/" + obj.GetName()
	if k.namespaced {
		origin = k.name + "/" + obj.GetNamespace() + "/" + obj.GetName()
	}
	doc := Document{Origin: origin}
	spec := map[string]any{}
	if v, ok := obj.Object["spec"]; ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			doc.Err = fmt.Errorf("spec: %s is not an object", show(v))
			return doc
		}
		spec = m
	}
	in, unmapped, err := k.intent(obj.GetName(), spec)
	if err != nil {
		doc.Err = err
		return doc
	}
	doc.Intents = []*sluicev1.Intent{in}
	doc.Err = unmappedError(unmapped)
	return doc
}

// watch follows every kind until ctx is done.
func (r *kubeRegistry) watch(ctx context.Context) {
	var wg sync.WaitGroup
	for _, k := range r.kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for again := false; ; again = true {
				err := r.follow(ctx, k, again)
				if ctx.Err() != nil {
					return
				}
				wait := time.Second // the server ended the watch (its timeout): watch again
				if err != nil {
					r.setWatchDown(k.name, err.Error())
					wait = kubeWatchRetry
				}
				if !sleep(ctx, wait) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// follow watches kind k and nudges at each event until the watch fails
// (an error) or the server ends it, or ctx is done. Set up again after a failure, it nudges at once:
// resources may have changed meanwhile.
func (r *kubeRegistry) follow(ctx context.Context, k kubeKind, again bool) error {
	client, err := r.client()
	if err != nil {
		return err
	}
	w, err := r.resource(client, k).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("watch %s: %w", k.name, err)
	}
	defer w.Stop()
	r.setWatchDown(k.name, "")
	if again {
		r.nudge()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			r.nudge()
			if ev.Type == watch.Error {
				return fmt.Errorf("watch %s: %w", k.name, apierrors.FromObject(ev.Object))
			}
		}
	}
}

// setWatchDown records why kind's watch is down ("" = it is up) and
// updates the note.
func (r *kubeRegistry) setWatchDown(kind, why string) {
	r.mu.Lock()
	if why == "" {
		delete(r.unwatch, kind)
	} else {
		r.unwatch[kind] = why
	}
	var parts []string
	for _, k := range sortedKeys(r.unwatch) {
		parts = append(parts, r.unwatch[k])
	}
	r.mu.Unlock()
	note := ""
	if len(parts) > 0 {
		note = fmt.Sprintf("not watched (%s): changes are seen at the next sync interval", strings.Join(parts, "; "))
	}
	r.setNote(note)
}
