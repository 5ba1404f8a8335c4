package rollout

import "slices"

// queue is a binary min-heap of nodes under less: the least is at hand,
// and a node joins, leaves from anywhere or moves in O(log n). Each node
// records its index in the queue (at), which is how it is found. The
// pending nodes, the revert queue and the nodes in flight are queues: as
// sorted slices, taking one node out of the middle (a node that leaves
// while pending) shifted every node behind it, and placing a fleet with a
// failure domain inserted each node into the middle, quadratic in the fleet
// (issue 20).
type queue struct {
	xs   []*node
	less func(a, b *node) bool
	at   func(n *node) *int32 // n's index field for this queue
}

func (q *queue) len() int { return len(q.xs) }

// has reports whether n is in q.
func (q *queue) has(n *node) bool {
	i := int(*q.at(n))
	return i < len(q.xs) && q.xs[i] == n
}

// first is the least node, nil when q is empty.
func (q *queue) first() *node {
	if len(q.xs) == 0 {
		return nil
	}
	return q.xs[0]
}

// push adds n, once.
func (q *queue) push(n *node) {
	if q.has(n) {
		return
	}
	q.xs = append(q.xs, n)
	q.set(len(q.xs)-1, n)
	q.up(len(q.xs) - 1)
}

// pop takes the least node out (nil when q is empty).
func (q *queue) pop() *node {
	n := q.first()
	if n != nil {
		q.remove(n)
	}
	return n
}

// remove takes n out, if it is in q.
func (q *queue) remove(n *node) {
	if !q.has(n) {
		return
	}
	i, last := int(*q.at(n)), len(q.xs)-1
	if i != last {
		q.set(i, q.xs[last])
	}
	q.xs[last] = nil
	q.xs = q.xs[:last]
	if i != last {
		q.fix(i)
	}
}

// moved puts n back in place after what less compares changed.
func (q *queue) moved(n *node) {
	if q.has(n) {
		q.fix(int(*q.at(n)))
	}
}

// clear empties q.
func (q *queue) clear() {
	clear(q.xs)
	q.xs = q.xs[:0]
}

// all is every node of q, in no particular order: q's own slice, to read
// and not to keep.
func (q *queue) all() []*node { return q.xs }

// sorted is every node of q, least first: a copy, sorted (O(n log n)).
func (q *queue) sorted() []*node {
	out := slices.Clone(q.xs)
	slices.SortFunc(out, q.cmp)
	return out
}

// while calls f with the nodes for which keep holds, in no particular
// order, looking only at them and their children: keep must fail for every
// node below one it fails for (as "due by now" does on a queue by
// deadline). O(the nodes found).
func (q *queue) while(keep func(n *node) bool, f func(n *node)) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(q.xs) || !keep(q.xs[i]) {
			return
		}
		f(q.xs[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

// least is up to k of the least nodes, least first. They sit in the heap's
// first k levels (the j-th least has at most j-1 ancestors), so only those
// 2^k-1 entries are looked at: k is small.
func (q *queue) least(k int) []*node {
	top := slices.Clone(q.xs[:min(len(q.xs), 1<<k-1)])
	slices.SortFunc(top, q.cmp)
	return top[:min(len(top), k)]
}

func (q *queue) cmp(a, b *node) int {
	switch {
	case q.less(a, b):
		return -1
	case q.less(b, a):
		return 1
	}
	return 0
}

func (q *queue) set(i int, n *node) {
	q.xs[i] = n
	*q.at(n) = int32(i)
}

func (q *queue) fix(i int) {
	if !q.down(i) {
		q.up(i)
	}
}

func (q *queue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(q.xs[i], q.xs[p]) {
			return
		}
		a, b := q.xs[i], q.xs[p]
		q.set(i, b)
		q.set(p, a)
		i = p
	}
}

// down sinks the node at i; it reports whether it moved.
func (q *queue) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(q.xs) {
			break
		}
		c := l
		if r := l + 1; r < len(q.xs) && q.less(q.xs[r], q.xs[l]) {
			c = r
		}
		if !q.less(q.xs[c], q.xs[i]) {
			break
		}
		a, b := q.xs[i], q.xs[c]
		q.set(i, b)
		q.set(c, a)
		i = c
	}
	return i > start
}
