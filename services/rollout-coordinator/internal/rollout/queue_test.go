package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A queue is a heap with each node's place kept in the node: whatever
// joins and leaves in whatever order, it must hand out what a sorted list
// would (checked against one, over a seeded random mix).
func TestQueue_HandsOutWhatASortedListWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 1))
	nodes := make([]*node, 200)
	for i := range nodes {
		nodes[i] = &node{name: fmt.Sprintf("n%03d", rng.IntN(1000)*1000+i), domain: fmt.Sprintf("%d", rng.IntN(4))}
	}
	q := queue{less: func(a, b *node) bool { return byPlace(a, b) < 0 }, at: func(n *node) *int32 { return &n.pi }}
	var want []*node // sorted by place
	for step := range 5_000 {
		n := nodes[rng.IntN(len(nodes))]
		i, in := slices.BinarySearchFunc(want, n, byPlace)
		switch op := rng.IntN(4); {
		case op < 2:
			q.push(n)
			if !in {
				want = slices.Insert(want, i, n)
			}
		case op == 2:
			q.remove(n)
			if in {
				want = slices.Delete(want, i, i+1)
			}
		default:
			if got := q.pop(); len(want) > 0 && got != want[0] || len(want) == 0 && got != nil {
				t.Fatalf("step %d: pop = %v, want the first of %d", step, got, len(want))
			}
			if len(want) > 0 {
				want = want[1:]
			}
		}
		if q.len() != len(want) || q.has(n) != slices.Contains(want, n) {
			t.Fatalf("step %d: %d queued (has %s: %v), want %d (%v)", step, q.len(), n.name, q.has(n), len(want), slices.Contains(want, n))
		}
		if len(want) > 0 && q.first() != want[0] {
			t.Fatalf("step %d: first %s, want %s", step, q.first().name, want[0].name)
		}
		if step%500 == 0 && !slices.Equal(q.sorted(), want) {
			t.Fatalf("step %d: sorted differs from the list", step)
		}
		if least := q.least(3); !slices.Equal(least, want[:min(3, len(want))]) {
			t.Fatalf("step %d: the least three differ", step)
		}
	}
}
