package frr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// ApplierConfig is what an Applier is made of: the instance it reloads,
// the node's settings and the operator's base file.
type ApplierConfig struct {
	// FRR is the instance every validation, reload and check addresses
	// (--frr-pathspace).
	FRR Instance
	// Settings are the node's (the agent's frr: settings and flags).
	Settings Settings
	// Base is the text of the operator's base file ("" = none: the file
	// reloaded is sluice's block alone); BasePath is where it was read
	// (--frr-base), for messages. It is read once, at start: a change to
	// it takes effect when the agent restarts.
	Base, BasePath string
	// Hostname is the daemons' host name. frr-reload compares every line,
	// hostname included, so when Base has no hostname line sluice's block
	// starts with "hostname <Hostname>" (else every reload would remove
	// FRR's). "" adds nothing.
	Hostname string
	// Dir is where the file to reload is written, then removed ("" =
	// os.TempDir()).
	Dir string
	// Settle is how long Apply waits after a reload for BGP to put the
	// changed policy in force (0 = DefaultSettle; see Apply).
	Settle time.Duration
}

// DefaultSettle is ApplierConfig.Settle's default. A changed prefix list
// or route map took 110-170 ms to leave FRR's RIB after the refresh here
// (route refresh over a veth, on a loaded 2-core machine).
const DefaultSettle = 500 * time.Millisecond

// Applier puts a node's routing in force through one FRR instance: it
// renders the config (Render), merges it into the base file (Merge), has
// FRR check the whole (Validate, the agent's pre-apply validation) and
// applies it with frr-reload.py (Instance.Reload), which changes only
// what differs from the running config. It implements agent.Applier and
// agent.Validator.
//
// The same file again reloads nothing: Apply compares the merged file
// with the one it last reloaded successfully and returns at once when they
// are equal (no vtysh, no frr-reload: microseconds). It does not ask FRR
// (a Diff costs about 0.4 s), so a change made to the running config by
// hand behind the agent's back stays until the next change of the file or
// the agent's restart. After a restart, or after a failed reload (which
// may have applied part of a file), nothing is remembered and the next
// Apply reloads: frr-reload then computes the difference itself, and a
// running config that already is the file is left as it is.
//
// Its methods are safe for concurrent use; applies run one at a time.
type Applier struct {
	cfg ApplierConfig
	// hostname starts sluice's block when the base has no hostname line.
	hostname string

	mu sync.Mutex
	// reloaded is the file of the last successful reload; "" = unknown.
	reloaded string
	// validated is the last file FRR's parser accepted.
	validated string
	reloads   int
}

var (
	_ agent.Applier   = (*Applier)(nil)
	_ agent.Validator = (*Applier)(nil)
)

// NewApplier checks c's settings and returns its Applier. It does no I/O:
// Preflight checks the host.
func NewApplier(c ApplierConfig) (*Applier, error) {
	if err := c.Settings.Validate(); err != nil {
		return nil, err
	}
	if err := CheckBasePath(c.BasePath, c.FRR); err != nil {
		return nil, err
	}
	if c.Settle < 0 {
		return nil, fmt.Errorf("%w: settle: %s is negative", ErrInvalidSettings, c.Settle)
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	a := &Applier{cfg: c}
	if c.Hostname != "" && !hasHostname(c.Base) {
		// In sluice's block, so that the base file's lines keep their
		// numbers in FRR's complaints.
		a.hostname = "hostname " + c.Hostname + "\n!\n"
	}
	return a, nil
}

// CheckBasePath refuses a base file that is inst's own frr.conf (by its
// path; Preflight also compares the files).
func CheckBasePath(path string, inst Instance) error {
	if path != "" && filepath.Clean(path) == inst.ConfigFile() {
		return baseIsConfigFile(path, inst)
	}
	return nil
}

func baseIsConfigFile(path string, inst Instance) error {
	return fmt.Errorf("%w: base file %s is %s's own frr.conf (%s), which frr-reload overwrites with the running config after every reload: keep your base in a file of its own (e.g. /etc/frr/base.conf) and give that",
		ErrBaseConflict, path, inst, inst.ConfigFile())
}

// Instance is the FRR instance the applier reloads.
func (a *Applier) Instance() Instance { return a.cfg.FRR }

// Reloads is how many reloads the applier ran successfully.
func (a *Applier) Reloads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reloads
}

// File returns the whole FRR configuration cfg means on this node: the
// base file with sluice's block.
func (a *Applier) File(cfg *sluicev1.NodeConfig) (string, error) {
	block, err := Render(cfg, a.cfg.Settings)
	if err != nil {
		return "", err
	}
	merged, err := Merge(a.cfg.Base, a.hostname+block)
	if err != nil {
		return "", fmt.Errorf("merge into %s: %w", a.baseName(), err)
	}
	return merged, nil
}

func (a *Applier) baseName() string {
	if a.cfg.BasePath == "" {
		return "the empty base file (no --frr-base)"
	}
	return "base file " + a.cfg.BasePath
}

// Preflight checks the host at the agent's start and returns what it
// found wrong that a later apply may still find right (warnings): FRR's
// programs must be installed, the base file must not be the instance's own
// frr.conf, and the base file with an empty block must pass FRR's parser
// (a base FRR refuses is refused here, at start, never at an apply, so
// that it is never reported as a config's fault). An instance whose socket
// directory does not exist (no daemon started with -N pathspace yet) is a
// warning: every apply fails until it exists.
func (a *Applier) Preflight(ctx context.Context) (warnings []string, err error) {
	if _, err := exec.LookPath(DefaultVtysh); a.cfg.FRR.Vtysh == "" && err != nil {
		return nil, fmt.Errorf("%w: no vtysh on the agent's PATH (%s): install FRR (Debian's frr and frr-pythontools)", ErrNotInstalled, os.Getenv("PATH"))
	}
	script := a.cfg.FRR.ReloadScript
	if script == "" {
		script = DefaultReloadScript
	}
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("%w: %s: install Debian's frr-pythontools: %w", ErrNotInstalled, script, err)
	}
	if a.cfg.BasePath != "" {
		bi, berr := os.Stat(a.cfg.BasePath)
		ci, cerr := os.Stat(a.cfg.FRR.ConfigFile())
		if berr == nil && cerr == nil && os.SameFile(bi, ci) {
			return nil, baseIsConfigFile(a.cfg.BasePath, a.cfg.FRR)
		}
	}
	empty, err := a.File(&sluicev1.NodeConfig{})
	if err != nil {
		return nil, err
	}
	if err := Validate(ctx, empty, a.cfg.FRR.Pathspace); err != nil {
		return nil, fmt.Errorf("%s with sluice's block of an empty config: %w", a.baseName(), err)
	}
	if err := a.socketDir(); err != nil {
		warnings = append(warnings, err.Error()+"; every apply fails until it does")
	}
	return warnings, nil
}

// socketDir reports an instance no daemon was started for: vtysh -N with
// a pathspace that does not exist only warns and exits 0.
func (a *Applier) socketDir() error {
	dir := a.cfg.FRR.SocketDir()
	if _, err := os.Stat(dir); err != nil {
		hint := "is FRR running?"
		if a.cfg.FRR.Pathspace != "" {
			hint = fmt.Sprintf("are FRR's daemons started with -N %s?", a.cfg.FRR.Pathspace)
		}
		return fmt.Errorf("%s: %w: its socket directory %s does not exist (%s)", a.cfg.FRR, ErrNotRunning, dir, hint)
	}
	return nil
}

// Validate asks the instance to answer (Ping: an error matching
// ErrNotRunning, ErrNotInstalled or ErrNoAnswer, and so agent.ErrNodeFault,
// when it does not), then has FRR's parser check the file cfg means
// (vtysh -C), changing nothing: a file FRR refuses is a *RefusedError naming each line of the
// file FRR refused with its message; a config Render refuses matches
// ErrInvalidConfig. A file accepted before (or reloaded) is not checked
// again.
func (a *Applier) Validate(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	// FRR must answer before any part of cfg applies (the agent validates
	// every part first): a down FRR is the node's fault, found while there is
	// nothing to restore; vtysh -C alone parses without the daemons.
	pctx, cancel := context.WithTimeout(ctx, DefaultCommandTimeout)
	err := a.cfg.FRR.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("before applying anything: %w", err)
	}
	file, err := a.File(cfg.GetConfig())
	if err != nil {
		return err
	}
	a.mu.Lock()
	known := file == a.validated || file == a.reloaded
	a.mu.Unlock()
	if known {
		return nil
	}
	if err := Validate(ctx, file, a.cfg.FRR.Pathspace); err != nil {
		return fmt.Errorf("%s: the file to reload (%s with sluice's block): %w", a.cfg.FRR, a.baseName(), err)
	}
	a.mu.Lock()
	a.validated = file
	a.mu.Unlock()
	return nil
}

// Apply makes the instance's running config the file cfg means, with
// frr-reload, unless that file is the one it reloaded last. Its errors
// name the instance and say what FRR said; a reload that fails may have
// applied part of the file (frr-reload applies line by line), and the
// next Apply (the agent's restore of last-good) reloads in full.
//
// After a reload it has BGP put the new policies in force at once
// (refresh: the pending route-map update fired now, then `clear bgp [vrf
// X] * soft` in every VRF with BGP) and waits Settle before it returns:
// bgpd on its own applies a changed prefix list or route map only after
// its route-map delay timer (5 s) — to its sessions and to the routes
// `import vrf` leaks between VRFs alike — and until then a route the new
// policy filters is still there, so a route check run at once would pass
// a config that drops it.
func (a *Applier) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	if cfg == nil {
		return errors.New("apply: no desired config")
	}
	file, err := a.File(cfg.GetConfig())
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if file == a.reloaded {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := a.socketDir(); err != nil {
		return err
	}
	f, err := os.CreateTemp(a.cfg.Dir, "sluice-frr-reload-*.conf")
	if err != nil {
		return fmt.Errorf("write the file to reload: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, werr := f.WriteString(file)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write the file to reload %s: %w", f.Name(), werr)
	}
	a.reloaded = ""
	if _, err := a.cfg.FRR.Reload(ctx, f.Name()); err != nil {
		return err
	}
	a.reloads++
	if err := a.refresh(ctx, file); err != nil {
		return err
	}
	a.reloaded, a.validated = file, file
	return nil
}

// hasHostname reports whether conf has a hostname line.
func hasHostname(conf string) bool {
	for _, l := range splitLines(conf) {
		if strings.HasPrefix(strings.TrimSpace(l), "hostname ") {
			return true
		}
	}
	return false
}
