package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// versionWait is how long `sluice version` collects the services' answers
// to the micro discovery request: every instance answers, none says how
// many there are.
const versionWait = 500 * time.Millisecond

func (a *app) versionCommand() *cobra.Command {
	var client bool
	cmd := &cobra.Command{
		Use:   "version [--client]",
		Short: "Print the version of sluice and of the services running",
		Long: `Version prints this CLI's version, then every running sluice service
instance's (each answers the NATS micro discovery request $SRV.INFO, as
'nats micro ls' shows it: SERVICE INSTANCE VERSION, the version being the
build the service was made from) and the agents' versions with how many run
each (from their presence).

With --client, or 'sluice --version', only the CLI's: nothing is read.
Exit 1 when NATS cannot be reached (after printing the CLI's version), as
kubectl version does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := fmt.Fprintf(a.streams.Out, "sluice %s\n", a.version); err != nil || client {
				return err
			}
			nc, js, err := a.jetStream()
			if err != nil {
				return err
			}
			defer nc.Close()
			services, err := discoverServices(cmd.Context(), nc)
			if err != nil {
				return err
			}
			rows := [][]string{{"SERVICE", "INSTANCE", "VERSION"}}
			for _, s := range services {
				rows = append(rows, []string{s.Name, cmp.Or(s.Metadata["instance"], s.ID), cmp.Or(s.Metadata["build"], s.Version)})
			}
			presences, _, err := list(cmd.Context(), js, contract.BucketNodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
			if err != nil {
				return err
			}
			agents := map[string]int{}
			for _, p := range presences {
				agents[cmp.Or(p.GetAgentVersion(), "unknown")]++
			}
			for _, v := range slices.Sorted(maps.Keys(agents)) {
				rows = append(rows, []string{"sluice-agent", fmt.Sprintf("%d node(s)", agents[v]), v})
			}
			if len(rows) == 1 {
				fmt.Fprintln(a.streams.Out, "no sluice service or agent is running on this NATS")
				return nil
			}
			fmt.Fprintln(a.streams.Out)
			return writeTable(a.streams.Out, rows)
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "only the CLI's version; read nothing")
	return cmd
}

// discoverServices asks every micro service for its info ($SRV.INFO) and
// returns the sluice services' answers that came within versionWait, by
// name and instance.
func discoverServices(ctx context.Context, nc *nats.Conn) ([]micro.Info, error) {
	inbox := nc.NewInbox()
	replies := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, fmt.Errorf("discover services: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject, err := micro.ControlSubject(micro.InfoVerb, "", "")
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover services: %w", err)
	}
	var out []micro.Info
	wait := time.NewTimer(versionWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
			slices.SortFunc(out, func(a, b micro.Info) int {
				return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Metadata["instance"], b.Metadata["instance"]), strings.Compare(a.ID, b.ID))
			})
			return out, nil
		case m := <-replies:
			var info micro.Info
			if json.Unmarshal(m.Data, &info) == nil && strings.HasPrefix(info.Name, "sluice-") {
				out = append(out, info)
			}
		}
	}
}
