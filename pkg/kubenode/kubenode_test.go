package kubenode_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicehq/sluice/pkg/kubenode"
)

// wait is how long a test waits for a label set that must come. margin: a
// wait ends as soon as the set comes, within milliseconds of the change.
const wait = 30 * time.Second

// quiet is how long a test watches for a label set that must not come.
// It suffices because the fake client delivers an event to the informer
// within milliseconds; a slower machine could only let a wrong set go
// unseen (a missed failure), never fail a correct watch.
const quiet = 300 * time.Millisecond

func testNode(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func startWatch(t *testing.T, client *fake.Clientset, node string) <-chan kubenode.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := kubenode.Watch(ctx, client, node, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return ch
}

func next(t *testing.T, ch <-chan kubenode.Node) kubenode.Node {
	t.Helper()
	select {
	case n, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return n
	case <-time.After(wait):
		t.Fatalf("nothing sent within %s", wait)
		return kubenode.Node{}
	}
}

// expect waits for the Node to be sent with labels want, not deleted.
func expect(t *testing.T, ch <-chan kubenode.Node, want map[string]string) {
	t.Helper()
	if got := next(t, ch); got.Deleted || !maps.Equal(got.Labels, want) {
		t.Fatalf("sent %+v, want labels %v, not deleted", got, want)
	}
}

// expectDeleted waits for the Node to be sent deleted, with its last labels.
func expectDeleted(t *testing.T, ch <-chan kubenode.Node, last map[string]string) {
	t.Helper()
	if got := next(t, ch); !got.Deleted || !maps.Equal(got.Labels, last) {
		t.Fatalf("sent %+v, want deleted with its last labels %v", got, last)
	}
}

func expectNothing(t *testing.T, ch <-chan kubenode.Node) {
	t.Helper()
	select {
	case l := <-ch:
		t.Fatalf("labels %v sent, want nothing", l)
	case <-time.After(quiet):
	}
}

func setLabels(t *testing.T, client *fake.Clientset, node string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = labels
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestWatch_SendsCurrentLabelsFirst(t *testing.T) {
	client := fake.NewClientset(
		testNode("node-01", map[string]string{"zone": "a", "rack": "r1"}),
		testNode("node-02", map[string]string{"zone": "b"}),
	)
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a", "rack": "r1"})
	expectNothing(t, ch)
}

func TestWatch_NodeWithoutLabels_SendsEmptySet(t *testing.T) {
	ch := startWatch(t, fake.NewClientset(testNode("node-01", nil)), "node-01")
	if got := next(t, ch).Labels; got == nil || len(got) != 0 {
		t.Fatalf("labels = %#v, want an empty, non-nil map", got)
	}
}

func TestWatch_LabelChange_SendsNewSet(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})

	setLabels(t, client, "node-01", map[string]string{"zone": "a", "rack": "r7"})
	expect(t, ch, map[string]string{"zone": "a", "rack": "r7"})

	setLabels(t, client, "node-01", map[string]string{"rack": "r7"})
	expect(t, ch, map[string]string{"rack": "r7"})
}

func TestWatch_ChangeOtherThanLabels_SendsNothing(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})

	n, _ := client.CoreV1().Nodes().Get(context.Background(), "node-01", metav1.GetOptions{})
	n.Annotations = map[string]string{"note": "x"}
	n.Spec.Unschedulable = true
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, ch)
}

func TestWatch_OtherNodesChange_SendsNothing(t *testing.T) {
	client := fake.NewClientset(
		testNode("node-01", map[string]string{"zone": "a"}),
		testNode("node-02", map[string]string{"zone": "b"}),
	)
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})

	setLabels(t, client, "node-02", map[string]string{"zone": "c"})
	if err := client.CoreV1().Nodes().Delete(context.Background(), "node-02", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, ch)
}

func TestWatch_NodeDeletedAndRecreated_SaysSoWithItsLabels(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	var watches atomic.Int32
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil // the fake's own watch
	})
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})
	// The fake's watch has no history: a delete before it starts is missed.
	waitFor(t, "the watch", func() bool { return watches.Load() >= 1 })
	time.Sleep(quiet)
	nodes := client.CoreV1().Nodes()
	ctx := context.Background()

	// Deleted: sent as deleted, with its last labels (never an empty set,
	// which would select the node out of every intent).
	if err := nodes.Delete(ctx, "node-01", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectDeleted(t, ch, map[string]string{"zone": "a"})
	expectNothing(t, ch)

	// Created again with the same labels: it is back.
	if _, err := nodes.Create(ctx, testNode("node-01", map[string]string{"zone": "a"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, map[string]string{"zone": "a"})
	expectNothing(t, ch)

	// Deleted and created again with other labels: both are sent.
	if err := nodes.Delete(ctx, "node-01", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectDeleted(t, ch, map[string]string{"zone": "a"})
	if _, err := nodes.Create(ctx, testNode("node-01", map[string]string{"zone": "b"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, map[string]string{"zone": "b"})
}

// A watch the API server ends with "resource version too old" (410) makes
// the informer list again: a change the dead watch never delivered is sent.
func TestWatch_WatchExpired_ListsAgainAndSendsMissedChange(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	// The first watch is one the test controls: changes made through the
	// client do not reach it.
	first := watch.NewFake()
	var watches atomic.Int32
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, first, nil
		}
		return false, nil, nil // the fake's own watch
	})
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})
	waitFor(t, "the first watch", func() bool { return watches.Load() >= 1 })

	setLabels(t, client, "node-01", map[string]string{"zone": "b"})
	expectNothing(t, ch) // the first watch does not see it

	expired := apierrors.NewResourceExpired("too old resource version: 1 (5)")
	first.Error(&expired.ErrStatus)
	expect(t, ch, map[string]string{"zone": "b"})

	// The new watch delivers changes again.
	waitFor(t, "a second watch", func() bool { return watches.Load() >= 2 })
	setLabels(t, client, "node-01", map[string]string{"zone": "c"})
	expect(t, ch, map[string]string{"zone": "c"})
}

// A watch that simply ends (the API server's watch timeout, a dropped
// connection) is started again.
func TestWatch_WatchClosed_WatchesAgain(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	first := watch.NewFake()
	var watches atomic.Int32
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, first, nil
		}
		return false, nil, nil
	})
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"zone": "a"})
	waitFor(t, "the first watch", func() bool { return watches.Load() >= 1 })

	first.Stop()
	waitFor(t, "a second watch", func() bool { return watches.Load() >= 2 })
	setLabels(t, client, "node-01", map[string]string{"zone": "b"})
	expect(t, ch, map[string]string{"zone": "b"})
}

func TestWatch_SlowReader_GetsNewestSetAndNoRepeats(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"v": "0"}))
	ch := startWatch(t, client, "node-01")
	expect(t, ch, map[string]string{"v": "0"})

	for _, v := range []string{"1", "2", "3", "4", "5"} {
		setLabels(t, client, "node-01", map[string]string{"v": v})
	}
	// Intermediate sets may be skipped, the newest is never lost, and no
	// set comes twice in a row.
	var last map[string]string
	for !maps.Equal(last, map[string]string{"v": "5"}) {
		got := next(t, ch).Labels
		if maps.Equal(got, last) {
			t.Fatalf("labels %v sent twice in a row", got)
		}
		last = got
	}
	expectNothing(t, ch)
}

func TestWatch_ContextEnds_ClosesChannel(t *testing.T) {
	client := fake.NewClientset(testNode("node-01", map[string]string{"zone": "a"}))
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := kubenode.Watch(ctx, client, "node-01", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, map[string]string{"zone": "a"})
	cancel()
	deadline := time.After(wait)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed after the context ended")
		}
	}
}

func TestWatch_StartErrors(t *testing.T) {
	forbidden := func(c *fake.Clientset) {
		c.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-01",
				errors.New(`User "system:serviceaccount:sluice:sluice-agent" cannot get resource "nodes"`))
		})
	}
	tests := []struct {
		name    string
		given   func(*fake.Clientset)
		node    string
		wantErr error
		wantMsg string
	}{
		{name: "no such node", node: "node-09", wantErr: kubenode.ErrNodeNotFound, wantMsg: "spec.nodeName"},
		{name: "no RBAC", node: "node-01", given: forbidden, wantErr: kubenode.ErrForbidden, wantMsg: "ServiceAccount"},
		{name: "no name", node: "", wantMsg: "no node name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(testNode("node-01", nil))
			if tt.given != nil {
				tt.given(client)
			}
			_, err := kubenode.Watch(context.Background(), client, tt.node, zerolog.Nop())
			if err == nil {
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
		})
	}
}

func TestNewClient(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: abc}
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	tests := []struct {
		name       string
		kubeconfig string
		wantMsg    string // "" = no error
	}{
		{name: "kubeconfig file", kubeconfig: kubeconfig},
		{name: "missing kubeconfig file", kubeconfig: filepath.Join(t.TempDir(), "none"), wantMsg: "kubeconfig"},
		{name: "in-cluster outside a cluster", kubeconfig: "", wantMsg: "in-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, err := kubenode.NewClient(tt.kubeconfig)
			if tt.wantMsg == "" {
				if err != nil || client == nil {
					t.Fatalf("NewClient: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %v, want one saying %q", err, tt.wantMsg)
			}
		})
	}
}

// waitFor polls cond until it holds, for at most wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
