package contract

import (
	"fmt"
	"slices"
	"strings"
)

// Labels name nodes (an agent's presence) and choose them (an intent's
// node selector). Their rules are Kubernetes' own, so that a Node's labels,
// which an agent with --kube-node-labels publishes, are always valid, and
// so that a label shown in an error, a listing or a terminal line is short
// printable text. The bounds are the one home of every label limit: the
// configurator refuses an intent that breaks them (pkg/intent's Validate),
// the agent refuses labels that break them (at start, and a Node's label
// change after), and a presence read that breaks them is quarantined
// (pkg/contract/wellformed). docs/intents.md ("Labels") documents them.
const (
	// MaxLabelName bounds a label key's name (the part after any prefix)
	// and a label value.
	MaxLabelName = 63
	// MaxLabelPrefix bounds a label key's prefix, a DNS subdomain.
	MaxLabelPrefix = 253
	// MaxSelectorLabels bounds the labels of one node selector: a node
	// must carry them all, and no fleet labels its nodes with more.
	MaxSelectorLabels = 64
	// MaxNodeLabels bounds the labels of one node's presence: room for a
	// Kubernetes Node's labels, node-feature-discovery's included.
	MaxNodeLabels = 256
)

// ValidLabelKey reports whether k can be a label key: an optional prefix (a
// DNS subdomain of at most 253 characters) and "/", then a name of at most
// 63 characters of [A-Za-z0-9._-] that starts and ends with a letter or a
// digit ("zone", "topology.kubernetes.io/zone").
func ValidLabelKey(k string) error {
	if err := CheckPrintable("label key", k); err != nil {
		return err
	}
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	switch {
	case k == "":
		return fmt.Errorf("a label key is empty")
	case hasPrefix && prefix == "":
		return fmt.Errorf("label key %s has an empty prefix before '/'", Clip(k))
	case hasPrefix && len(prefix) > MaxLabelPrefix:
		return fmt.Errorf("label key %s has a prefix of %s characters, over the limit of %d", Clip(k), Thousands(len(prefix)), MaxLabelPrefix)
	case hasPrefix && !dnsSubdomain(prefix):
		return fmt.Errorf("label key %s: the prefix %s must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit", Clip(k), Clip(prefix))
	case name == "":
		return fmt.Errorf("label key %s has an empty name", Clip(k))
	case len(name) > MaxLabelName:
		return fmt.Errorf("label key %s has a name of %s characters, over the limit of %d", Clip(k), Thousands(len(name)), MaxLabelName)
	case !labelName(name):
		return fmt.Errorf("label key %s: the name must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit", Clip(k))
	}
	return nil
}

// ValidLabelValue reports whether v can be the value of the label k: empty,
// or at most 63 characters of [A-Za-z0-9._-] starting and ending with a
// letter or a digit. (A selector asks for a value: see pkg/intent.)
func ValidLabelValue(k, v string) error {
	if err := CheckPrintable(fmt.Sprintf("the value of label %s", Quote(k)), v); err != nil {
		return err
	}
	switch {
	case len(v) > MaxLabelName:
		return fmt.Errorf("label %s has a value of %s characters, over the limit of %d", Quote(k), Thousands(len(v)), MaxLabelName)
	case v != "" && !labelName(v):
		return fmt.Errorf("label %s has the value %s: a value must be letters, digits, '-', '_' and '.', starting and ending with a letter or digit", Quote(k), Clip(v))
	}
	return nil
}

// CheckLabels reports every problem of a label set of at most max labels:
// over max, one error saying so (its labels are not checked one by one);
// else each key and value that breaks its rule, in key order. what names
// the set in the count's error ("the node", "--labels"): "the node has 300 labels, over the limit of 256".
func CheckLabels(what string, labels map[string]string, max int) []error {
	if len(labels) > max {
		return []error{fmt.Errorf("%s has %s labels, over the limit of %d", what, Thousands(len(labels)), max)}
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var errs []error
	for _, k := range keys {
		if err := ValidLabelKey(k); err != nil {
			errs = append(errs, err)
		} else if err := ValidLabelValue(k, labels[k]); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// labelName: [A-Za-z0-9][A-Za-z0-9._-]* ending in [A-Za-z0-9], not empty.
func labelName(s string) bool {
	if s == "" || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// dnsSubdomain: lower-case DNS labels joined by dots (RFC 1123).
func dnsSubdomain(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' {
				return false
			}
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
