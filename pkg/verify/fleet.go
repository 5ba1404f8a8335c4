package verify

import (
	"slices"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// examplesShown is how many example nodes a finding names.
const examplesShown = 3

// fleet is the present nodes grouped by their label set: a fleet of 100,000
// nodes has a few hundred distinct label sets (zone × rack × role), and a
// selector selects a whole set or none of it, so every question is asked
// once per set.
type fleet struct {
	sets  []*labelSet // in the order of their canonical form
	total int
}

// labelSet is the nodes that carry exactly these labels.
type labelSet struct {
	labels map[string]string
	count  int
	names  []string // the examplesShown smallest names, sorted
}

func newFleet(nodes []Node) *fleet {
	f := &fleet{total: len(nodes)}
	byCanon := map[string]*labelSet{}
	var canons []string
	var keys []string
	var buf []byte
	for _, n := range nodes {
		buf, keys = canonical(buf[:0], keys[:0], n.Labels)
		s := byCanon[string(buf)] // no copy: the conversion in a map index does not allocate
		if s == nil {
			s = &labelSet{labels: n.Labels}
			c := string(buf)
			byCanon[c] = s
			canons = append(canons, c)
		}
		s.count++
		s.names = keepSmallest(s.names, n.Name)
	}
	slices.Sort(canons)
	for _, c := range canons {
		f.sets = append(f.sets, byCanon[c])
	}
	return f
}

// canonical appends labels to buf as one string, the same for equal maps;
// keys is scratch space. Both are returned for reuse: per node this
// allocates nothing once they have grown.
func canonical(buf []byte, keys []string, labels map[string]string) ([]byte, []string) {
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		buf = append(buf, k...)
		buf = append(buf, 0)
		buf = append(buf, labels[k]...)
		buf = append(buf, 0)
	}
	return buf, keys
}

// keepSmallest adds name to names, a sorted list of at most examplesShown.
func keepSmallest(names []string, name string) []string {
	i, found := slices.BinarySearch(names, name)
	if found || i >= examplesShown {
		return names
	}
	names = slices.Insert(names, i, name)
	if len(names) > examplesShown {
		names = names[:examplesShown]
	}
	return names
}

// reach is the nodes some of ins select: up to examplesShown names and how
// many in all.
func (f *fleet) reach(ins []*sluicev1.Intent) ([]string, int) {
	return f.where(func(labels map[string]string) bool {
		return slices.ContainsFunc(ins, func(in *sluicev1.Intent) bool { return render.Selects(intent.Selector(in), labels) })
	})
}

// where is the nodes whose labels satisfy ok: up to examplesShown names
// and how many in all.
func (f *fleet) where(ok func(map[string]string) bool) ([]string, int) {
	var names []string
	count := 0
	for _, s := range f.sets {
		if !ok(s.labels) {
			continue
		}
		count += s.count
		for _, n := range s.names {
			names = keepSmallest(names, n)
		}
	}
	return names, count
}
