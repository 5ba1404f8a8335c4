package main

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The agent publishes its Node's labels with --labels on top, and follows
// the Node's changes.
func TestFollowNode_MergesFlagLabelsOverTheNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a", "rack": "r1"}}}
	client := fake.NewClientset(node)
	first, updates, err := followNode(ctx, client, "n1", map[string]string{"rack": "override", "role": "edge"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"zone": "a", "rack": "override", "role": "edge"}; !maps.Equal(first, want) {
		t.Fatalf("first labels %v, want %v", first, want)
	}
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
	if _, _, err := followNode(ctx, client, "missing", nil, zerolog.Nop()); err == nil {
		t.Fatal("a Node that does not exist is not an error at start")
	}
}
