package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dev"
)

func (a *app) devCommand() *cobra.Command {
	opts := dev.Options{}
	var noExamples bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of sluice in this process, on an embedded NATS server, with simulated agents",
		Long: `Dev runs an embedded nats-server (file storage under DATA/nats), the
configurator, the rollout-coordinator, the reaper and N agents named node-01,
node-02 …, labelled zone=zone-a|b|c and rack=rack-1|2. Each agent writes the
config it applies to DATA/agents/<node>/config.json.

On the first start of a data directory the examples are applied; later starts
resume where the last one stopped and never undo what you applied. Remove the
data directory to start over.

Every service logs JSON to DATA/sluice.log; --verbose also prints the logs here.`,
		Example: "  sluice dev\n  sluice dev --agents 20 --max-parallel 25%\n  sluice dev --check-cmd 'test \"$SLUICE_NODE\" != node-03'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if noExamples {
				opts.Examples = ""
			} else if _, err := os.Stat(opts.Examples); err != nil {
				if cmd.Flags().Changed("examples") {
					return &ExitError{Code: 2, Err: fmt.Errorf("--examples: %w", err)}
				}
				if !errors.Is(err, os.ErrNotExist) {
					return err
				}
				opts.Examples = "" // the default directory is absent: run without examples
			}
			if err := checkMaxParallel(opts.MaxParallel); err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			opts.Stderr = a.streams.Err
			opts.Version = a.version
			return dev.Run(cmd.Context(), opts, a.streams.Out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data", "./"+dev.DefaultDataDir, "data directory (NATS storage, agents' state, log)")
	f.StringVar(&opts.Listen, "listen", dev.DefaultListen, "NATS listen address host:port")
	f.IntVar(&opts.Agents, "agents", dev.DefaultAgents, "number of simulated agents")
	f.StringVar(&opts.Examples, "examples", "./examples", "directory of intents applied on the first start of the data directory")
	f.BoolVar(&noExamples, "no-examples", false, "apply no examples, even on a first start")
	f.StringVar(&opts.MaxParallel, "max-parallel", "1", "max parallel of the examples' rollout: a count or a percentage")
	f.StringVar(&opts.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringArrayVar(&opts.CheckCmds, "check-cmd", nil, "health check every agent runs after each apply (repeatable): a shell command with SLUICE_NODE and SLUICE_CONFIG set; non-zero exit restores the node's last-good config")
	f.BoolVarP(&opts.Verbose, "verbose", "v", false, "also print the services' logs to stderr")
	return cmd
}
