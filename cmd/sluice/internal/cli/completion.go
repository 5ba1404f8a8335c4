package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
)

// completeTimeout bounds what shell completion may wait for the control
// plane: a tab press that hangs is worse than one that offers nothing.
const completeTimeout = 2 * time.Second

// addCompletions teaches shell completion (`sluice completion bash|zsh|…`)
// the names the control plane holds: kinds, node names, rollout ids,
// fingerprints, revisions, registries and freezes, read when Tab is pressed.
func (a *app) addCompletions(root *cobra.Command) {
	byKind := func(kind string) cobra.CompletionFunc {
		return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return a.storedNames(cmd.Context(), kind, toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	}
	// The first argument only: the commands take one name.
	first := func(kind string) cobra.CompletionFunc {
		names := byKind(kind)
		return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return names(cmd, args, toComplete)
		}
	}
	args := map[string]cobra.CompletionFunc{
		"sluice get":                 a.completeGet,
		"sluice delete":              a.completeDelete,
		"sluice describe node":       first("nodes"),
		"sluice describe rollout":    first("rollouts"),
		"sluice rollout status":      first("rollouts"),
		"sluice rollout abort":       first("rollouts"),
		"sluice rollout pause":       first("rollouts"),
		"sluice rollout resume":      first("rollouts"),
		"sluice fingerprint forgive": first("fingerprints"),
		"sluice creds revoke":        first("nodes"),
		"sluice freeze remove":       first("freezes"),
		"sluice registry remove":     first("registries"),
		"sluice registry confirm":    first("registries"),
	}
	flags := map[string]map[string]cobra.CompletionFunc{
		"sluice rollout undo":   {"to-revision": byKind("revisions")},
		"sluice reaper confirm": {"node": byKind("nodes")},
		"sluice diff":           {"registry": byKind("registries")},
		"sluice events": {"kind": func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return withPrefix(contract.EventKinds, toComplete), cobra.ShellCompDirectiveNoFileComp
		}},
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f, ok := args[c.CommandPath()]; ok {
			c.ValidArgs = nil // cobra takes one or the other
			c.ValidArgsFunction = f
		}
		for flag, f := range flags[c.CommandPath()] {
			_ = c.RegisterFlagCompletionFunc(flag, f)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeGet completes `sluice get KIND NAME…`: the kinds, then the
// names of the kind's items.
func (a *app) completeGet(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		var kinds []string
		for _, k := range getKinds {
			kinds = append(kinds, k.name)
		}
		return withPrefix(kinds, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	kind, err := findGetKind(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.storedNames(cmd.Context(), kind.name, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeDelete completes `sluice delete KIND NAME`: the intent kinds,
// then the names of the stored intents of that kind.
func (a *app) completeDelete(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		kinds := make([]string, len(intent.Kinds))
		for i, k := range intent.Kinds {
			kinds[i] = intent.KeyToken(k)
		}
		return withPrefix(kinds, toComplete), cobra.ShellCompDirectiveNoFileComp
	case 1:
		prefix := intent.KeyToken(args[0]) + "/"
		var names []string
		for _, n := range a.storedNames(cmd.Context(), "intents", prefix) {
			names = append(names, strings.TrimPrefix(n, prefix))
		}
		return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// storedNames are the names of kind's items (as `get KIND NAME` takes
// them: kind/name for intents) that start with prefix; nothing when the
// control plane cannot be read within completeTimeout.
func (a *app) storedNames(ctx context.Context, kindName, prefix string) []string {
	kind, err := findGetKind(kindName)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	nc, js, err := a.jetStream()
	if err != nil {
		return nil
	}
	defer nc.Close()
	l, _, err := kind.load(ctx, js)
	if err != nil {
		return nil
	}
	n, ok := l.(named)
	if !ok {
		return nil
	}
	var out []string
	for _, name := range n.names() {
		if kind.name != "intents" {
			_, name, _ = strings.Cut(name, "/")
		}
		out = append(out, name)
	}
	return withPrefix(out, prefix)
}

// withPrefix keeps the items of s that start with prefix.
func withPrefix(s []string, prefix string) []string {
	var out []string
	for _, v := range s {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}
