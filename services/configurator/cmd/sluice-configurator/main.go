// Command sluice-configurator runs the configurator: the intents API, validation and revisions.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	// Time zones for strategy windows (contract.ParseWindow): the images are
	// FROM scratch, with no zoneinfo.
	_ "time/tzdata"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/services/configurator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-configurator", flag.ContinueOnError)
	var common cmdutil.Common
	common.Register(fs)
	source := fs.String("source", configurator.DefaultSource, "source recorded on applied intents when a request names none")
	fetchTimeout := fs.Duration("registry-fetch-timeout", 30*time.Second, "bound on one read of a registry (Redis, directory, a git fetch); a read that takes longer counts as unreachable")
	gitCache := fs.String("git-cache", defaultGitCache(), "directory of the bare clones of git registries fetched from a server (https://, ssh://), one per registry and URL (a removed registry's, or its old URL's, is removed); \"\" keeps them in memory, cloned anew at each start")
	strictVerify := fs.Bool("strict-verify", false, "the fleet verifier's warnings refuse an apply as its errors do (docs/intents.md, \"Fleet rules\")")
	var deleteAfter *time.Duration // nil: the per-registry default
	fs.Func("registry-delete-after", "how long an intent must be missing from every answer of its registry before it is marked for deletion; 0 marks it at the first answer without it (default: per registry twice its sync interval, at least 30s)",
		func(v string) error {
			d, err := parseDeleteAfter(v)
			deleteAfter = &d
			return err
		})
	return common.Main(ctx, fs, args, stderr, nil, func(rt cmdutil.Runtime) (cmdutil.Service, error) {
		return configurator.New(configurator.Config{Conn: rt.Conn, Settings: common.Settings(), Log: rt.Log, Source: *source,
			FetchTimeout: *fetchTimeout, GitCache: *gitCache, DeleteAfter: deleteAfter, StrictVerify: *strictVerify, Version: cmdutil.Version, Metrics: configurator.NewMetrics(rt.Metrics)})
	})
}

// parseDeleteAfter reads --registry-delete-after: a duration, 0 or more.
// The flag package prefixes the error with the flag's name and value.
func parseDeleteAfter(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("want a duration such as 1m (0 marks a missing intent at once)")
	}
	return d, configurator.CheckDeleteAfter(d)
}

// defaultGitCache is $XDG_CACHE_HOME/sluice/git (~/.cache/sluice/git), or
// "" (clones in memory) where the user has no cache directory, as in a
// container without HOME.
func defaultGitCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sluice", "git")
}
