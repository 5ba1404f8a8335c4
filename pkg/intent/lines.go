package intent

import (
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// fieldLines finds the line of a field in a document, so that an error
// points at the line to fix ("document 1 (line 7)"), not the document's
// first. The document is parsed again as a YAML node tree (JSON is YAML)
// only when an error names a field.
type fieldLines struct {
	data   []byte
	first  int // the document's first line in its file
	root   *yaml.Node
	parsed bool
}

// line is the file line of path ("spec.vlan", "spec.anycastGateways[1]",
// "spec.nodeSelector.matchLabels.topology.kubernetes.io/zone") in item
// (1-based; 0 when the document is one intent), or 0 when it is not found.
func (f *fieldLines) line(item int, path string) int {
	if !f.parsed {
		f.parsed = true
		var root yaml.Node
		if yaml.Unmarshal(f.data, &root) == nil && len(root.Content) == 1 {
			f.root = root.Content[0]
		}
	}
	n := f.root
	if n == nil {
		return 0
	}
	if item > 0 {
		if n.Kind != yaml.SequenceNode || item > len(n.Content) {
			return 0
		}
		n = n.Content[item-1]
	}
	if found := locate(n, path); found != nil {
		return f.first + found.Line - 1
	}
	return 0
}

// locate walks path from n: a mapping key (written as in the path, or in
// snake_case for a camelCase path: both are accepted), a list index [i].
// Map keys may hold dots (label keys), so a key is matched whole against
// the path's start. It returns the key's node (its line is the field's),
// or the list item's.
func locate(n *yaml.Node, path string) *yaml.Node {
	path = strings.TrimPrefix(path, ".")
	if path == "" {
		return n
	}
	switch n.Kind {
	case yaml.SequenceNode:
		if !strings.HasPrefix(path, "[") {
			return nil
		}
		end := strings.IndexByte(path, ']')
		i, err := strconv.Atoi(path[1:max(end, 1)])
		if end < 0 || err != nil || i < 0 || i >= len(n.Content) {
			return nil
		}
		rest := path[end+1:]
		if rest == "" {
			return n.Content[i]
		}
		return locate(n.Content[i], rest)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i]
			for _, name := range []string{key.Value, camel(key.Value)} {
				rest, ok := strings.CutPrefix(path, name)
				if !ok || rest != "" && rest[0] != '.' && rest[0] != '[' {
					continue
				}
				if rest == "" {
					return key
				}
				if found := locate(n.Content[i+1], rest); found != nil {
					return found
				}
			}
		}
	}
	return nil
}

// camel turns snake_case into camelCase (anycast_gateways → anycastGateways).
func camel(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
