package view

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
)

// FieldChange is one field that differs between two versions of an
// intent: its path as intent files spell it ("spec.vlan",
// "spec.anycastGateways[1]", "spec.nodeSelector.matchLabels.zone") and its
// old and new value as one line of JSON, empty (and absent from JSON) on
// the side where it is unset.
type FieldChange struct {
	Path string          `json:"path"`
	From json.RawMessage `json:"from,omitempty"`
	To   json.RawMessage `json:"to,omitempty"`
}

// SpecFields lists the fields that differ between two specs as
// ConfigChange gives them (specJSON: {"<kind>":{...}}), sorted by path. A
// list whose length changed is one change of the whole list; so is a spec
// that cannot be read is one change under "spec" (what is not JSON as a
// JSON string).
func SpecFields(from, to string) []FieldChange {
	o, okO := specBody(from)
	n, okN := specBody(to)
	if !okO || !okN {
		if from == to {
			return nil
		}
		return []FieldChange{{Path: "spec", From: asJSON(from), To: asJSON(to)}}
	}
	var out []FieldChange
	walkFields("spec", o, n, &out)
	return out
}

// specBody is the spec under its one kind key, decoded with numbers kept
// as written.
func specBody(s string) (any, bool) {
	if s == "" {
		return map[string]any{}, true
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var m map[string]any
	if d.Decode(&m) != nil || len(m) != 1 {
		return nil, false
	}
	for _, v := range m {
		return v, true
	}
	return nil, false
}

// walkFields appends the leaves that differ between o and n under path;
// nil is a field that is unset.
func walkFields(path string, o, n any, out *[]FieldChange) {
	om, oIsMap := o.(map[string]any)
	nm, nIsMap := n.(map[string]any)
	if oIsMap && nIsMap {
		keys := make([]string, 0, len(om)+len(nm))
		for k := range om {
			keys = append(keys, k)
		}
		for k := range nm {
			if _, ok := om[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			walkFields(path+"."+k, om[k], nm[k], out)
		}
		return
	}
	ol, oIsList := o.([]any)
	nl, nIsList := n.([]any)
	if oIsList && nIsList && len(ol) == len(nl) {
		for i := range ol {
			walkFields(path+"["+strconv.Itoa(i)+"]", ol[i], nl[i], out)
		}
		return
	}
	if reflect.DeepEqual(o, n) {
		return
	}
	*out = append(*out, FieldChange{Path: path, From: oneLineJSON(o), To: oneLineJSON(n)})
}

// oneLineJSON is v as compact JSON, nil for nil.
func oneLineJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"?"`)
	}
	return b
}

// asJSON is s as a JSON value: itself when it is JSON, else a string.
func asJSON(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	return oneLineJSON(s)
}
