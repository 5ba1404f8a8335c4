package view

import (
	"bytes"
	"encoding/json"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ConfigChange is one intent that differs between two rendered node
// configs, as `sluice diff` prints it: "+" added, "-" removed, "~" changed;
// From and To are its spec as one line of JSON.
type ConfigChange struct {
	Op     string `json:"op"`
	Intent string `json:"intent"` // <Kind>/<name>
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
}

// ConfigDiff lists the intents that differ from one node config to
// another, by intent.
func ConfigDiff(from, to *sluicev1.NodeConfig) []ConfigChange {
	index := func(c *sluicev1.NodeConfig) map[string]*sluicev1.Intent {
		m := map[string]*sluicev1.Intent{}
		for _, in := range c.GetIntents() {
			m[intent.ID(in)] = in
		}
		return m
	}
	old, nu := index(from), index(to)
	ids := make([]string, 0, len(old)+len(nu))
	for id := range old {
		ids = append(ids, id)
	}
	for id := range nu {
		if _, ok := old[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []ConfigChange{}
	for _, id := range ids {
		o, n := old[id], nu[id]
		switch {
		case o == nil:
			out = append(out, ConfigChange{Op: "+", Intent: id, To: specJSON(n)})
		case n == nil:
			out = append(out, ConfigChange{Op: "-", Intent: id, From: specJSON(o)})
		case !proto.Equal(o, n):
			out = append(out, ConfigChange{Op: "~", Intent: id, From: specJSON(o), To: specJSON(n)})
		}
	}
	return out
}

// specJSON is an intent's spec as one line of JSON.
func specJSON(in *sluicev1.Intent) string {
	in = proto.Clone(in).(*sluicev1.Intent)
	in.Name = ""
	b, err := store.Marshal(in)
	if err != nil {
		return "?"
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}
