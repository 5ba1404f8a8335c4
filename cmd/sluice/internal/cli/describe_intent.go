package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// describeIntentCommand is `describe intent KIND/NAME`.
func (a *app) describeIntentCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "intent KIND/NAME | KIND NAME",
		Short: "Show one intent: its spec, source, status and, when deleting, why it is still there",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output); err != nil {
				return err
			}
			kind, name, err := intentArg(args)
			if err != nil {
				return &ExitError{Code: ExitUsage, Err: err}
			}
			return a.describeIntent(cmd.Context(), kind, name, output)
		},
	}
	outputFlag(cmd.Flags(), &output)
	return cmd
}

// intentArg reads KIND/NAME or KIND NAME.
func intentArg(args []string) (kind, name string, err error) {
	k, n := args[0], ""
	if len(args) == 2 {
		n = args[1]
	} else if kk, nn, ok := strings.Cut(args[0], "/"); ok {
		k, n = kk, nn
	}
	if n == "" {
		return "", "", fmt.Errorf("intent %q: give KIND/NAME or KIND NAME (e.g. routingtable/mgmt)", strings.Join(args, " "))
	}
	if kind, err = intent.ParseKind(k); err != nil {
		return "", "", fmt.Errorf("intent kind %q: %w", k, err)
	}
	return kind, n, nil
}

func (a *app) describeIntent(ctx context.Context, kind, name, output string) error {
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	si, bad, err := getOne(ctx, js, contract.BucketIntents, intent.KeyOf(kind, name), func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	if err != nil {
		return err
	}
	id := intent.IDOf(kind, name)
	if len(bad) > 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("intent %s: its stored value cannot be read: %s", id, bad[0].Reason)}
	}
	if si == nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("no intent %s (sluice get intents lists them)", id)}
	}
	var kept []string
	if si.GetMarkedForDeletion() {
		st, err := reaperStatus(ctx, nc)
		kept = deletingLines(intentList{si}, st, err, a.now())
	}
	if output != formatTable {
		b, err := view.JSON(si)
		if err != nil {
			return err
		}
		return writeStructured(a.streams.Out, map[string]any{"intent": b, "deleting": kept}, output)
	}
	return writeIntentDescription(a.streams.Out, id, si, kept, a.now())
}

// writeIntentDescription writes the labelled lines of describe intent;
// kept is deletingLines' answer for it.
func writeIntentDescription(w io.Writer, id string, si *sluicev1.StoredIntent, kept []string, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	line("Intent:", "%s", id)
	status := "active"
	if si.GetMarkedForDeletion() {
		status = "deleting"
	}
	line("Status:", "%s", status)
	for _, k := range kept {
		line("", "%s", strings.TrimSpace(k))
	}
	line("Source:", "%s", intentSource(si))
	line("Updated:", "%s ago", age(now, si.GetUpdatedAt()))
	spec, err := view.JSON(si.GetIntent())
	if err != nil {
		return err
	}
	line("Spec:", "%s", spec)
	return tw.Flush()
}
