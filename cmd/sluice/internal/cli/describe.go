package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// describeEvents is how many of a node's last events describe shows.
const describeEvents = 10

func (a *app) describeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe node NAME | rollout [ID] | intent KIND/NAME",
		Short: "Show everything the control plane knows of one node, rollout or intent",
		Long: `describe node NAME shows one node as the control plane sees it: its presence
(labels, agent, heartbeat), its last status (phase, fingerprint, revision,
rollout, operation, the failed check and its output), its desired config and
its backup (the config a revert puts back, and whether the node had proven
it), each with its revision and rollout, and its last events. It reads the
buckets the same way 'get nodes' does; without this you would need
'nats kv get sluice-nodeconfigs NODE.desired'.

describe rollout [ID] is 'sluice rollout status [ID]'.

describe intent KIND/NAME shows one intent: its status, source, last update
and spec; when it is deleting, why it is still there, as the reaper decided
it, and when the reaper looks again.

-o json and -o yaml print {"node", "presence", "status", "desired", "backup",
"unreadable"} (the stored objects, protojson field names); for an intent
{"intent", "deleting"} (the stored intent, and the lines saying why it is
still there).`,
		Example: "  sluice describe node node-03\n  sluice describe node node-03 -o json\n  sluice describe rollout\n  sluice describe intent routingtable/mgmt",
	}
	var output string
	node := &cobra.Command{
		Use:   "node NAME",
		Short: "Show one node: presence, status, desired config, backup and last events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output); err != nil {
				return err
			}
			if err := contract.ValidName(args[0]); err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("node name %q: %w", args[0], err)}
			}
			return a.describeNode(cmd.Context(), args[0], output)
		},
	}
	outputFlag(node.Flags(), &output)
	cmd.AddCommand(node)
	cmd.AddCommand(a.describeIntentCommand())
	// describe rollout is rollout status, flags and all.
	if status := findSub(a.rolloutCommand(), "status"); status != nil {
		status.Use = strings.Replace(status.Use, "status", "rollout", 1)
		status.Short = "Show a rollout's progress (as 'sluice rollout status')"
		cmd.AddCommand(status)
	}
	return cmd
}

// findSub is cmd's subcommand called name, nil when it has none.
func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

// nodeDescription is what describe node shows, as read.
type nodeDescription struct {
	Node       string                  `json:"node"`
	Presence   *sluicev1.NodePresence  `json:"-"`
	Status     *sluicev1.NodeStatus    `json:"-"`
	Desired    *sluicev1.DesiredConfig `json:"-"`
	Backup     *sluicev1.DesiredConfig `json:"-"`
	Unreadable []unreadableKey         `json:"-"`
}

func (a *app) describeNode(ctx context.Context, name, output string) error {
	nc, js, err := a.jetStream()
	if err != nil {
		return err
	}
	defer nc.Close()
	d := nodeDescription{Node: name}
	var bad []unreadableKey
	if d.Presence, bad, err = getOne(ctx, js, contract.BucketNodes, name, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }); err != nil {
		return err
	}
	d.Unreadable = append(d.Unreadable, bad...)
	if d.Status, bad, err = getOne(ctx, js, contract.BucketStatus, name, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }); err != nil {
		return err
	}
	d.Unreadable = append(d.Unreadable, bad...)
	for _, c := range []struct {
		key string
		dst **sluicev1.DesiredConfig
	}{{contract.DesiredKey(name), &d.Desired}, {contract.BackupKey(name), &d.Backup}} {
		if *c.dst, bad, err = getOne(ctx, js, contract.BucketNodeConfigs, c.key, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }); err != nil {
			return err
		}
		d.Unreadable = append(d.Unreadable, bad...)
	}
	if d.Presence == nil && d.Status == nil && d.Desired == nil && d.Backup == nil && len(d.Unreadable) == 0 {
		return &ExitError{Code: 1, Err: fmt.Errorf("no node %q: it has no presence, status or config (sluice get nodes lists the nodes)", name)}
	}
	if output != formatTable {
		return printDescription(a.streams.Out, d, output)
	}
	writeNodeDescription(a.streams.Out, d, a.now())
	fmt.Fprintf(a.streams.Out, "\nEvents (the last %d about it; sluice events --node %s shows every event naming it):\n", describeEvents, name)
	stream, err := js.Stream(ctx, contract.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		fmt.Fprintln(a.streams.Out, "  none: no sluice service has started on this server yet")
		return nil
	}
	if err != nil {
		return fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubjects: contract.EventFilterSubjects(contract.KindNode, name)}
	return a.printEvents(ctx, stream, cfg, eventFilter{}, describeEvents, false, formatTable)
}

// printDescription prints d as one JSON or YAML object of stored objects.
func printDescription(w io.Writer, d nodeDescription, output string) error {
	obj := map[string]any{"node": d.Node, "unreadable": d.Unreadable}
	if d.Unreadable == nil {
		obj["unreadable"] = []unreadableKey{}
	}
	for _, part := range []struct {
		key string
		msg proto.Message
		ok  bool
	}{{"presence", d.Presence, d.Presence != nil}, {"status", d.Status, d.Status != nil},
		{"desired", d.Desired, d.Desired != nil}, {"backup", d.Backup, d.Backup != nil}} {
		obj[part.key] = nil
		if !part.ok {
			continue
		}
		// As every -o json: 64-bit integers as numbers, enums with their words.
		b, err := view.JSON(part.msg)
		if err != nil {
			return err
		}
		obj[part.key] = b
	}
	return writeStructured(w, obj, output)
}

// writeNodeDescription writes d as the labelled lines of the table format.
func writeNodeDescription(w io.Writer, d nodeDescription, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	line("Node:", "%s", d.Node)
	if p := d.Presence; p != nil {
		line("Present:", "yes, agent %s, started %s, last heartbeat %s", cmp.Or(p.GetAgentVersion(), "(version unknown)"),
			before(now, p.GetStartedAt()), before(now, p.GetHeartbeatAt()))
		keys := slices.Sorted(maps.Keys(p.GetLabels()))
		labels := make([]string, len(keys))
		for i, k := range keys {
			labels[i] = k + "=" + p.GetLabels()[k]
		}
		line("Labels:", "%s", cmp.Or(strings.Join(labels, ", "), "(none)"))
		if runs := inForceLine(p); runs != "" {
			line("Runs:", "%s (the agent's last-good, as its presence says)", runs)
		}
	} else {
		line("Present:", "no (no presence lease: the agent is stopped, cut off or gone)")
	}
	if st := d.Status; st != nil {
		line("Status:", "%s, fingerprint %s, revision %s, rollout %s, %s", nodePhase(st.GetPhase()),
			short(st.GetFingerprint()), short(st.GetRevision()), cmp.Or(st.GetRollout(), "-"), before(now, st.GetLastUpdate()))
		if m := st.GetMessage(); m != "" {
			line("  Message:", "%s", m)
		}
		if op := st.GetOperation(); op != "" {
			line("  Operation:", "%s", op)
		}
		if c := st.GetFailedCheck(); c != "" {
			line("  Failed check:", "%s", c)
		}
		if out := strings.TrimSpace(st.GetCheckOutput()); out != "" {
			line("  Check output:", "%s", strings.ReplaceAll(out, "\n", "\n\t"))
		}
	} else {
		line("Status:", "none reported yet")
	}
	for _, c := range []struct {
		label string
		d     *sluicev1.DesiredConfig
		none  string
	}{{"Desired:", d.Desired, noDesired(d.Presence)},
		{"Backup:", d.Backup, "none (no rollout has changed this node's config yet)"}} {
		if c.d == nil {
			line(c.label, "%s", c.none)
			continue
		}
		var marks []string
		if c.d.GetRevert() {
			marks = append(marks, "a revert")
		}
		if c.d.GetCancel() {
			marks = append(marks, "cancelled")
		}
		if c.label == "Backup:" {
			if c.d.GetProven() {
				marks = append(marks, "proven on this node")
			} else {
				marks = append(marks, "not proven on this node")
			}
		}
		extra := ""
		if len(marks) > 0 {
			extra = " (" + strings.Join(marks, ", ") + ")"
		}
		line(c.label, "fingerprint %s, revision %s, rollout %s, written %s%s", short(c.d.GetFingerprint()), short(c.d.GetRevision()),
			cmp.Or(c.d.GetRollout(), "-"), before(now, c.d.GetWrittenAt()), extra)
		if op := c.d.GetOperation(); op != "" {
			line("  Operation:", "%s", op)
		}
	}
	if fp := d.Status.GetAppliedFingerprint(); fp != "" {
		// What runs on the node now (after a failed check, the last-good it
		// restored), named by the stored config that carries it, if any.
		line("Applied:", "fingerprint %s%s: in force on the node now", short(fp), appliedFrom(fp, d.Desired, d.Backup))
	}
	if li := d.Status.GetLastInvalid(); li != nil {
		kind := "rollout target"
		if li.GetRevert() {
			kind = "revert to its backup"
		}
		line("Last invalid:", "fingerprint %s, revision %s, rollout %s (%s), check %s, %s", short(li.GetFingerprint()), short(li.GetRevision()),
			cmp.Or(li.GetRollout(), "-"), kind, cmp.Or(li.GetCheck(), "-"), before(now, li.GetAt()))
		if out := strings.TrimSpace(li.GetOutput()); out != "" {
			line("  Output:", "%s", strings.ReplaceAll(out, "\n", "\n\t"))
		}
	}
	for _, u := range d.Unreadable {
		line("Unreadable:", "%s/%s: %s", u.Bucket, u.Key, u.Reason)
	}
	tw.Flush()
}

// appliedFrom names the stored config whose fingerprint fp is (", revision
// R, the backup's"), or "" when neither is.
func appliedFrom(fp string, desired, backup *sluicev1.DesiredConfig) string {
	for _, c := range []struct {
		what string
		d    *sluicev1.DesiredConfig
	}{{"desired", desired}, {"backup", backup}} {
		if c.d.GetFingerprint() == fp {
			return fmt.Sprintf(", revision %s, the %s's", short(c.d.GetRevision()), c.what)
		}
	}
	return ""
}

// before says how long before now t was ("5m ago"); "-" for no time.
func before(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return none
	}
	return age(now, t) + " ago"
}

// noDesired says why a node has no desired config: never configured, or,
// when its agent says it runs one, a store that holds none (lost).
func noDesired(p *sluicev1.NodePresence) string {
	if runs := inForceLine(p); runs != "" {
		return "none stored, yet the node runs " + runs + " (the store holds no record of it: lost or wiped?)"
	}
	return "none written (the node has never been configured)"
}
