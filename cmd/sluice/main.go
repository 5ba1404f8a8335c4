// Command sluice is the operator's tool for sluice: apply and delete
// intents, list what the control plane stores, follow rollouts and events,
// and run everything locally with `sluice dev`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	// Time zones for strategy windows (contract.ParseWindow): the images are
	// FROM scratch, with no zoneinfo.
	_ "time/tzdata"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal starts a clean shutdown, a second one kills.
		<-ctx.Done()
		stop()
	}()
	os.Exit(cli.Run(ctx, os.Args[1:], cli.Streams{Out: os.Stdout, Err: os.Stderr, TTY: isTerminal(os.Stdout)}, version))
}

// isTerminal reports whether f is a character device, such as a terminal.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
