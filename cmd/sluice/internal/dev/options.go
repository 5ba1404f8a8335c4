package dev

// Options of a dev system, their defaults and checks.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// Defaults of Options.
const (
	DefaultDataDir = ".sluice"
	DefaultListen  = "127.0.0.1:4222"
	DefaultAgents  = 5
)

// Options configure a dev system.
type Options struct {
	// DataDir holds JetStream's files (nats/), the agents' state (agents/<node>/) and sluice.log.
	DataDir string
	// Listen is the NATS host:port; port -1 picks a free one (tests).
	Listen string
	// Agents is how many agents run, named node-01, node-02, …
	Agents int
	// Examples is a directory of intents applied on the first start of
	// DataDir; "" applies none.
	Examples string
	// MaxParallel is the strategy the examples are rolled out with ("" = 1).
	MaxParallel string
	// LogLevel is the level of every service's log (default info).
	LogLevel string
	// Verbose also writes the logs, human-readable, to Stderr; without it
	// only errors go there.
	Verbose bool
	// Stderr receives human-readable logs; nil means os.Stderr.
	Stderr io.Writer
	// Version is published by the agents with their presence.
	Version string
	// Settings are the bucket and lease settings; zero means
	// contract.DefaultSettings() with NATSCluster replicas.
	Settings contract.Settings
	// NATSCluster is the number of embedded NATS servers: 0 or 1 for one
	// server, 3 for a cluster on Listen's port and the two after it.
	NATSCluster int
	// CheckCmds are shell commands every agent runs as health checks after
	// each apply (agent.ExecCheck: SLUICE_NODE, SLUICE_CONFIG); a failing
	// one makes the node restore its last-good config.
	CheckCmds []string
	// Registries are stored in the control bucket before the services
	// start (replacing specs of the same name), so that the configurator
	// syncs them: what --redis and --watch-dir build.
	Registries []*sluicev1.RegistrySpec
	// RegistryDeleteAfter is the configurator's settle period for intents
	// missing from a registry's answers (--registry-delete-after); nil: per
	// registry twice its sync interval, at least 30s.
	RegistryDeleteAfter *time.Duration
	// Secure runs the server in operator mode with the credentials setup
	// in DataDir/creds (made on the first secure start, as `sluice creds
	// init` does): every service, agent and dev's own connections use a
	// user of their role, each agent its own node's (CredsDir, AdminCreds).
	Secure bool
	// Dashboard, when set, starts the dashboard once the services run: it
	// returns the page's URL (the banner prints it) and the function that
	// serves it until its ctx ends. nil runs none (--dashboard-addr off).
	Dashboard func(s *System) (url string, serve func(context.Context) error, err error)
	// HTTPAddr, when set, is where /healthz, /readyz and /metrics are
	// served, as each service binary's --http-addr does, for the whole
	// system: every service's metrics and the agents' (together) in one
	// registry, ready once every service and agent is.
	HTTPAddr string
}

func (o *Options) setDefaults() {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.NATSCluster < 1 {
		o.NATSCluster = 1
	}
	if o.Settings.NodeLease <= 0 {
		o.Settings = contract.DefaultSettings()
		o.Settings.Replicas = o.NATSCluster
	}
}

// check reports options that cannot run, naming the flag.
func (o *Options) check() error {
	if o.Agents < 0 {
		return fmt.Errorf("--agents %d is negative", o.Agents)
	}
	if o.NATSCluster != 1 && o.NATSCluster != 3 {
		return fmt.Errorf("--nats-cluster %d: want 1 (one server) or 3 (a cluster that survives one server stopping)", o.NATSCluster)
	}
	if o.RegistryDeleteAfter != nil {
		if err := configurator.CheckDeleteAfter(*o.RegistryDeleteAfter); err != nil {
			return fmt.Errorf("--registry-delete-after %s: %w", *o.RegistryDeleteAfter, err)
		}
	}
	if o.Settings.Replicas > o.NATSCluster {
		return fmt.Errorf("--replicas %d needs as many servers: pass --nats-cluster 3, or --replicas 1", o.Settings.Replicas)
	}
	return o.Settings.Validate()
}

// storeDirs are the NATS servers' store directories under the data directory.
func (o *Options) storeDirs() []string {
	if o.NATSCluster == 1 {
		return []string{filepath.Join(o.DataDir, "nats")}
	}
	dirs := make([]string, o.NATSCluster)
	for i := range dirs {
		dirs[i] = filepath.Join(o.DataDir, fmt.Sprintf("nats-%d", i+1))
	}
	return dirs
}

// checkLayout refuses a data directory made with another number of NATS
// servers (its state is in the other layout's store directories), or made
// with --secure when started without, or the other way round (the state is
// in another account).
func checkLayout(o Options) error {
	single := filepath.Join(o.DataDir, "nats")
	first := filepath.Join(o.DataDir, "nats-1")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	secured := exists(filepath.Join(o.CredsDir(), "operator.nk"))
	switch {
	case secured && !o.Secure:
		return fmt.Errorf("data directory %s was made with --secure: pass --secure, or --data with another directory", o.DataDir)
	case !secured && o.Secure && (exists(single) || exists(first)):
		return fmt.Errorf("data directory %s was made without --secure (its state is in the unauthenticated account): start without --secure, or pass --data with another directory", o.DataDir)
	case o.NATSCluster == 1 && exists(first) && !exists(single):
		return fmt.Errorf("data directory %s was made with --nats-cluster 3: pass --nats-cluster 3, or --data with another directory", o.DataDir)
	case o.NATSCluster > 1 && exists(single) && !exists(first):
		return fmt.Errorf("data directory %s was made with one NATS server: start without --nats-cluster, or pass --data with another directory", o.DataDir)
	}
	return nil
}

// checkListen fails early, and clearly, when the address is taken.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if port == "-1" || port == "0" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%w): is another `sluice dev` running? Stop it, or pass --listen with another port", addr, err)
	}
	return l.Close()
}

// CredsDir is where --secure keeps its credentials setup.
func (o Options) CredsDir() string { return filepath.Join(o.DataDir, "creds") }
