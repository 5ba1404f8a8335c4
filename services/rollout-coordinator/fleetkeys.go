package coordinator

import (
	"strings"
	"sync"
	"time"
)

// fleetKeys is what the loop keeps per node besides the decider's state:
// the revisions of the node's keys and when its last desired-config write
// landed. A leader holds it for the whole fleet, so it is one table with one
// record per node: three maps keyed by node (the nodeconfigs revisions, the
// status revisions, the landing times) cost about 250 bytes per node, this
// one about 100. Its zero value is empty and ready; it is safe for the
// loop, the writers and the effects at once.
type fleetKeys struct {
	mu sync.Mutex
	m  map[string]*nodeKeys
}

// nodeKeys is one node's record.
type nodeKeys struct {
	config [2]uint64 // its desired and backup keys' revisions (absentRev: none known)
	status uint64    // the newest revision of its status seen (0: none)
	landed time.Time // when its last desired-config write landed in this term (zero: none)
}

// at is node's record, made when create is set (nil otherwise when there is
// none). The caller holds mu. A record's key is a copy, stored once (a map
// assignment stores the key given again): node may be cut from a message
// subject, which the table would otherwise keep whole.
func (f *fleetKeys) at(node string, create bool) *nodeKeys {
	k := f.m[node]
	if k == nil && create {
		if f.m == nil {
			f.m = map[string]*nodeKeys{}
		}
		k = &nodeKeys{config: [2]uint64{absentRev, absentRev}}
		f.m[strings.Clone(node)] = k
	}
	return k
}

// configRev is the revision of node's desired (i 0) or backup (i 1) key as
// last read or written, ok false when none is known.
func (f *fleetKeys) configRev(node string, i int) (rev uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.at(node, false); k != nil && k.config[i] != absentRev {
		return k.config[i], true
	}
	return 0, false
}

func (f *fleetKeys) setConfigRev(node string, i int, rev uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at(node, true).config[i] = rev
}

// statusRev is the newest revision of node's status seen (0: none).
func (f *fleetKeys) statusRev(node string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.at(node, false); k != nil {
		return k.status
	}
	return 0
}

func (f *fleetKeys) setStatusRev(node string, rev uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at(node, true).status = rev
}

// landed is when node's last desired-config write landed (zero: none).
func (f *fleetKeys) landed(node string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.at(node, false); k != nil {
		return k.landed
	}
	return time.Time{}
}

func (f *fleetKeys) setLanded(node string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at(node, true).landed = at
}
