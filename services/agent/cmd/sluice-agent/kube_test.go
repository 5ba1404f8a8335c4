package main

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The agent publishes its Node's labels with --labels on top, and follows
// the Node's changes, its deletion (the node leaves) and its creation again.
func TestFollowNode_MergesFlagLabelsAndSaysWhenTheNodeLeaves(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a", "rack": "r1"}}}
	client := fake.NewClientset(node)
	// The fake's watch has no history: a change before it starts is missed.
	var watches atomic.Int32
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		watches.Add(1)
		return false, nil, nil // the fake's own watch
	})
	first, updates, departures, err := followNode(ctx, client, "n1", map[string]string{"rack": "override", "role": "edge"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"zone": "a", "rack": "override", "role": "edge"}; !maps.Equal(first, want) {
		t.Fatalf("first labels %v, want %v", first, want)
	}
	for start := time.Now(); watches.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > waitFor {
			t.Fatal("the informer never watched")
		}
	}
	time.Sleep(100 * time.Millisecond) // the reactor runs just before the watch is served
	node = node.DeepCopy()
	node.Labels["zone"] = "b"
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-updates:
		if want := map[string]string{"zone": "b", "rack": "override", "role": "edge"}; !maps.Equal(got, want) {
			t.Fatalf("updated labels %v, want %v", got, want)
		}
	case <-time.After(waitFor):
		t.Fatal("no update after the Node's labels changed")
	}

	// Deleted: the node leaves; created again with other labels: the new
	// labels come first, then the node is back (it registers with them).
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-departures:
		if !d.Gone || d.Reason != "its Kubernetes Node n1 was deleted" {
			t.Fatalf("departure %+v, want gone: its Kubernetes Node n1 was deleted", d)
		}
	case l := <-updates:
		t.Fatalf("labels %v after the Node was deleted, want a departure", l)
	case <-time.After(waitFor):
		t.Fatal("no departure after the Node was deleted")
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "c"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-updates:
		if want := map[string]string{"zone": "c", "rack": "override", "role": "edge"}; !maps.Equal(got, want) {
			t.Fatalf("labels of the Node created again %v, want %v", got, want)
		}
	case d := <-departures:
		t.Fatalf("departure %+v before the new Node's labels", d)
	case <-time.After(waitFor):
		t.Fatal("no labels after the Node was created again")
	}
	select {
	case d := <-departures:
		if d.Gone || d.Reason != "its Kubernetes Node n1 was created again" {
			t.Fatalf("departure %+v, want back: its Kubernetes Node n1 was created again", d)
		}
	case <-time.After(waitFor):
		t.Fatal("not back after the Node was created again")
	}

	if _, _, _, err := followNode(ctx, client, "missing", nil, zerolog.Nop()); err == nil {
		t.Fatal("a Node that does not exist is not an error at start")
	}
}
