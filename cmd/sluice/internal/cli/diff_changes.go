package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// groupNamesShown is how many nodes a group names in diff's short form;
// the plan's waves below it name them all.
const groupNamesShown = 8

// changeGroup is the nodes whose configs get the same intent changes
// (the same intents added, removed, and changed in the same fields to the
// same values): diff's short form prints each group once, not each node.
type changeGroup struct {
	Count   int            `json:"count"`
	Nodes   []string       `json:"nodes"`   // in the order of changes[]
	Intents []intentChange `json:"intents"` // without the whole specs
}

// groupChanges groups changes by what changes in them, in the order each
// group's first node has in changes.
func groupChanges(changes []nodeChange) []changeGroup {
	groups := []changeGroup{}
	index := map[string]int{}
	for _, c := range changes {
		intents := make([]intentChange, len(c.Intents))
		for i, ic := range c.Intents {
			intents[i] = intentChange{Intent: ic.Intent, Op: ic.Op, Fields: ic.Fields}
		}
		b, err := json.Marshal(intents)
		if err != nil { // cannot happen: strings only
			b = []byte(c.Node)
		}
		key := string(b)
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, changeGroup{Nodes: []string{}, Intents: intents})
		}
		groups[i].Nodes = append(groups[i].Nodes, c.Node)
		groups[i].Count++
	}
	return groups
}

// printGroups writes each group once: how many nodes and the first of
// them, then each intent change, a changed intent with one line per field
// ("spec.vlan: 100 → 200").
func (r *diffReport) printGroups(w io.Writer) {
	for _, g := range r.Groups {
		names := g.Nodes
		more := ""
		if len(names) > groupNamesShown {
			names, more = names[:groupNamesShown], fmt.Sprintf(" and %d more", len(g.Nodes)-groupNamesShown)
		}
		noun := "nodes"
		if g.Count == 1 {
			noun = "node"
		}
		fmt.Fprintf(w, "  %d %s: %s%s\n", g.Count, noun, strings.Join(names, " "), more)
		printIntentChanges(w, "      ", g.Intents)
	}
}

// printIntentChanges writes one line per intent change after indent, a
// changed intent with its fields ("~ layer2network/a spec.vlan: 100 → 200",
// or one line per field below it when several change).
func printIntentChanges(w io.Writer, indent string, intents []intentChange) {
	for _, ic := range intents {
		switch {
		case ic.Op == "added":
			fmt.Fprintf(w, "%s+ %s\n", indent, ic.Intent)
		case ic.Op == "removed":
			fmt.Fprintf(w, "%s- %s\n", indent, ic.Intent)
		case len(ic.Fields) == 1:
			fmt.Fprintf(w, "%s~ %s %s\n", indent, ic.Intent, fieldLine(ic.Fields[0].Path, ic.Fields[0].From, ic.Fields[0].To))
		default:
			fmt.Fprintf(w, "%s~ %s\n", indent, ic.Intent)
			for _, f := range ic.Fields {
				fmt.Fprintf(w, "%s    %s\n", indent, fieldLine(f.Path, f.From, f.To))
			}
		}
	}
}

// fieldLine is "path: from → to", an unset side as "(unset)".
func fieldLine(path string, from, to json.RawMessage) string {
	unset := func(v json.RawMessage) string {
		if len(v) == 0 {
			return "(unset)"
		}
		return string(v)
	}
	return fmt.Sprintf("%s: %s → %s", path, unset(from), unset(to))
}

// printNodes writes every changing node with its fingerprints and each
// intent's whole spec (--full).
func (r *diffReport) printNodes(w io.Writer) {
	for _, c := range r.Changes {
		fmt.Fprintf(w, "  %s  %s → %s\n", c.Node, orNone(short(c.From)), short(c.To))
		for _, ic := range c.Intents {
			switch ic.Op {
			case "added":
				fmt.Fprintf(w, "      + %s %s\n", ic.Intent, ic.To)
			case "removed":
				fmt.Fprintf(w, "      - %s\n", ic.Intent)
			default:
				fmt.Fprintf(w, "      ~ %s %s → %s\n", ic.Intent, ic.From, ic.To)
			}
		}
	}
}
