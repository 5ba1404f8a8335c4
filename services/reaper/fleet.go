package reaper

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
)

// A pass needs two sets: the nodes present (a presence key) and the nodes
// that own keys (a status, a desired config or a backup). Listing them
// costs one delivered message per key — 300,000 to 400,000 keys every 30 s
// at 100,000 nodes, more than the fleet's heartbeats —, so while Run runs
// the reaper keeps both from watches of the three buckets' keys (headers
// only) and a pass reads them from memory: a watch costs one message per
// write, and nothing while the fleet is at rest. A pass lists instead while
// a watch has not caught up (at start, after it ended and was made again)
// and every relistEvery passes, so a watch that missed a change (a
// presence's expiry marker removed before a restarted watch reached it)
// cannot hide a node for longer than that. Either way the sets only choose
// what a pass looks at: reap reads the node's keys and its presence
// directly before deleting anything.

// relistEvery: every 20th pass lists (10 minutes at the default interval);
// a variable for tests.
var relistEvery = 20

// fleet is the two sets a pass works on.
type fleet struct {
	present map[string]bool  // node → it has a presence key
	keys    map[string]uint8 // node → which keys it owns (keyStatus|keyDesired|keyBackup); no entry: none
}

// The keys a node owns.
const (
	keyStatus uint8 = 1 << iota
	keyDesired
	keyBackup
)

func (f *fleet) owns(n string) bool { return f.keys[n] != 0 }

// owners is how many nodes own keys.
func (f *fleet) owners() int { return len(f.keys) }

// absentOwners names the nodes that own keys and have no presence, sorted.
func (f *fleet) absentOwners() []string {
	var out []string
	for n := range f.keys {
		if !f.present[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// set records that node owns (on) or no longer owns the key bit.
func (f *fleet) set(node string, bit uint8, on bool) {
	v := f.keys[node]
	if on {
		v |= bit
	} else {
		v &^= bit
	}
	if v == 0 {
		delete(f.keys, node)
		return
	}
	if _, ok := f.keys[node]; !ok {
		node = strings.Clone(node) // the key is cut from a message subject
	}
	f.keys[node] = v
}

// statusKey records a change of a status key.
func (f *fleet) statusKey(key string, deleted bool) {
	if !contract.IsControlKey(key) {
		f.set(key, keyStatus, !deleted)
	}
}

// configKey records a change of a nodeconfigs key.
func (f *fleet) configKey(key string, deleted bool) {
	n, which, ok := contract.NodeOfConfigKey(key)
	if !ok || contract.IsControlKey(key) {
		return
	}
	switch which {
	case "desired":
		f.set(n, keyDesired, !deleted)
	case "backup":
		f.set(n, keyBackup, !deleted)
	}
}

// listFleet lists the three buckets' keys, as a pass did before the
// watches, and counts the listing.
func (r *Reaper) listFleet(ctx context.Context, h *handles) (*fleet, error) {
	r.listings.Add(1)
	presentKeys, err := h.nodes.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list present nodes: %w", err)
	}
	statusKeys, err := h.status.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list node statuses: %w", err)
	}
	configKeys, err := h.configs.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list node configs: %w", err)
	}
	f := &fleet{present: make(map[string]bool, len(presentKeys)), keys: map[string]uint8{}}
	for _, n := range presentKeys {
		f.present[n] = true
	}
	for _, k := range statusKeys {
		f.statusKey(k, false)
	}
	for _, k := range configKeys {
		f.configKey(k, false)
	}
	return f, nil
}

// watched is the fleet as the watches see it, and which of them caught up.
type watched struct {
	fleet
	caught [3]bool // by part: the watch delivered every key there was and still runs
}

// The watches' parts.
const (
	partPresence = iota
	partStatus
	partConfigs
)

func newWatched() *watched {
	return &watched{fleet: fleet{present: map[string]bool{}, keys: map[string]uint8{}}}
}

// restart forgets what part's watch saw, before a new watch delivers every
// key again (a change missed in between would otherwise stay). Nil (no
// Run) does nothing, as see does.
func (w *watched) restart(part int) {
	if w == nil {
		return
	}
	w.caught[part] = false
	switch part {
	case partPresence:
		clear(w.present)
	case partStatus:
		for n := range w.keys {
			w.set(n, keyStatus, false)
		}
	case partConfigs:
		for n := range w.keys {
			w.set(n, keyDesired|keyBackup, false)
		}
	}
}

// see records one entry of part's watch; the first entry without a key
// says it caught up.
func (w *watched) see(part int, key string, deleted bool) {
	if w == nil {
		return
	}
	if key == "" {
		w.caught[part] = true
		return
	}
	switch part {
	case partPresence:
		if deleted {
			delete(w.present, key)
		} else {
			w.present[strings.Clone(key)] = true
		}
	case partStatus:
		w.statusKey(key, deleted)
	case partConfigs:
		w.configKey(key, deleted)
	}
}

// complete reports whether every watch caught up.
func (w *watched) complete() bool { return w.caught == [3]bool{true, true, true} }

// fleetFor returns the sets a pass works on: the watched ones when every
// watch caught up and this is not a relisting pass, else listed; r.mu must
// be held.
func (r *Reaper) fleetFor(ctx context.Context, h *handles) (*fleet, error) {
	r.passes++
	if r.view != nil && r.view.complete() && r.passes%relistEvery != 0 {
		return &r.view.fleet, nil
	}
	return r.listFleet(ctx, h)
}
