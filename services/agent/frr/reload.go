package frr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Reload makes the instance's running config equal file with
// frr-reload.py --reload: it computes the difference with the running
// config and applies only that ("no" lines, then the added ones), so the
// same file again changes nothing. frr-reload first has vtysh parse the
// whole file; a file FRR refuses is an ErrRefused error quoting FRR's
// line and message ("line 8: % Unknown command: …") and the running
// config is left as it was. After a reload frr-reload also writes the
// running config to the instance's ConfigFile (vtysh "write"), so a
// restarted FRR boots what was applied. It returns frr-reload's log
// (what it executed).
//
// frr-reload compares every line, hostname included: the file's
// "hostname" must be the daemons' own (the host's, os.Hostname, unless
// they run in a UTS namespace of their own), or every diff carries it and
// every reload re-applies it.
func (i Instance) Reload(ctx context.Context, file string) (string, error) {
	out, log, err := i.reloadScript(ctx, "--reload", file)
	if err != nil {
		return log, err
	}
	return strings.TrimSpace(out + "\n" + log), nil
}

// ConfigDiff is what a reload of a file would change in the running
// config, as frr-reload.py --test prints it: each entry is one command in
// its context ("router bgp 65001\n neighbor 192.0.2.2 route-map deny in").
type ConfigDiff struct {
	Delete []string
	Add    []string
}

// Empty reports whether the file equals the running config.
func (d ConfigDiff) Empty() bool { return len(d.Delete) == 0 && len(d.Add) == 0 }

// String is the diff in frr-reload's words: "- " before each line to
// delete, "+ " before each to add; "no change" when empty.
func (d ConfigDiff) String() string {
	if d.Empty() {
		return "no change"
	}
	var b strings.Builder
	for _, l := range d.Delete {
		b.WriteString("- " + strings.ReplaceAll(l, "\n", "\n  ") + "\n")
	}
	for _, l := range d.Add {
		b.WriteString("+ " + strings.ReplaceAll(l, "\n", "\n  ") + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Diff reports what Reload(file) would change, changing nothing
// (frr-reload.py --test): an empty diff means the running config already
// is file. A file FRR refuses is an ErrRefused error, as for Reload.
func (i Instance) Diff(ctx context.Context, file string) (ConfigDiff, error) {
	out, _, err := i.reloadScript(ctx, "--test", file)
	if err != nil {
		return ConfigDiff{}, err
	}
	return parseDiff(out), nil
}

// reloadScript runs frr-reload.py in mode (--reload or --test) on file,
// its log on stderr (--stdout: not in /var/log/frr/frr-reload.log, where
// a failed apply's reason would otherwise be the only trace), and returns
// stdout and the log. A failure is explained in FRR's words.
func (i Instance) reloadScript(ctx context.Context, mode, file string) (stdout, log string, err error) {
	script := i.ReloadScript
	if script == "" {
		script = DefaultReloadScript
	}
	what := "frr-reload " + mode + " " + file
	if _, err := os.Stat(file); err != nil {
		return "", "", fmt.Errorf("%s: %s: %w", i, what, err)
	}
	fi, err := os.Stat(script)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s: %s not found (install Debian's frr-pythontools): %w", ErrNotInstalled, what, script, err)
	}
	// The script runs with the interpreter its shebang names (Debian's
	// /usr/bin/python3), not whatever "python3" is first in PATH: a
	// version manager's shim there (pyenv's) cost 0.2-0.3 s per reload on
	// this project's hosts, and another Python may lack what the
	// package's depends on. A script without its exec bit runs with
	// python3 from PATH.
	bin, args := script, []string{mode, "--stdout"}
	if fi.Mode()&0o111 == 0 {
		bin, args = "python3", []string{script, mode, "--stdout"}
	}
	if i.Pathspace != "" {
		args = append(args, "--pathspace", i.Pathspace)
	}
	if i.Vtysh != "" && i.Vtysh != DefaultVtysh {
		// frr-reload runs BINDIR/vtysh.
		args = append(args, "--bindir", dirOf(i.Vtysh))
	}
	args = append(args, file)
	stdout, log, err = runBounded(ctx, bin, args...)
	if err == nil {
		return stdout, log, nil
	}
	if errors.Is(err, ErrNoAnswer) || errors.Is(err, exec.ErrNotFound) {
		return stdout, log, i.explain(what, bin, "", "", err)
	}
	// Why it failed: FRR down, else what frr-reload logged as an error.
	if perr := i.Ping(ctx); perr != nil && (errors.Is(perr, ErrNotRunning) || errors.Is(perr, ErrNotInstalled)) {
		return stdout, log, fmt.Errorf("%s: %w", what, perr)
	}
	reason := reloadErrors(stdout + "\n" + log)
	if reason == "" {
		reason = clip(strings.TrimSpace(stdout+"\n"+log), 2000)
	}
	return stdout, log, fmt.Errorf("%s: %s: %w: %s (%w)", i, what, ErrRefused, reason, err)
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "."
}

// parseDiff reads frr-reload.py --test's output: a "Lines To Delete"
// section and a "Lines To Add" section, each under a line of "=", each
// entry a command with its context lines (indented) above it.
func parseDiff(out string) ConfigDiff {
	var d ConfigDiff
	var into *[]string
	for _, l := range strings.Split(out, "\n") {
		switch strings.TrimSpace(l) {
		case "Lines To Delete":
			into = &d.Delete
			continue
		case "Lines To Add":
			into = &d.Add
			continue
		case "":
			continue
		}
		if into == nil || strings.Trim(l, "=") == "" {
			continue
		}
		// Each entry starts at column 0 (its outermost context); the
		// lines of its inner contexts are indented.
		if strings.HasPrefix(l, " ") && len(*into) > 0 {
			(*into)[len(*into)-1] += "\n" + l
			continue
		}
		*into = append(*into, l)
	}
	return d
}

// logRecord starts a line of frr-reload's log: "2026-12-01 21:37:18,398 LEVEL: message".
var logRecord = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} +(\w+): ?(.*)$`)

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// reloadErrors returns the errors and warnings of frr-reload's log, each
// with its continuation lines, and any line it printed without a log
// header (errors it reports on stdout), python's bytes reprs decoded: one
// record per error, joined by "; ".
func reloadErrors(out string) string {
	var records []string
	in, skip := false, false // in an error record of the log; in another one
	for _, l := range strings.Split(ansi.ReplaceAllString(out, ""), "\n") {
		l = strings.TrimSpace(decodePyBytes(l))
		if m := logRecord.FindStringSubmatch(l); m != nil {
			in = m[1] == "ERROR" || m[1] == "WARNING" || m[1] == "CRITICAL"
			skip = !in
			if in {
				records = append(records, m[2])
			}
			continue
		}
		switch {
		case l == "" || skip:
		case in:
			records[len(records)-1] += " " + l
		default: // printed, not logged: an error line and its continuation
			records = append(records, l)
			in = true
		}
	}
	// frr-reload prints the same error on stdout and in its log.
	var uniq []string
	seen := map[string]bool{}
	for _, r := range records {
		if !seen[r] {
			seen[r] = true
			uniq = append(uniq, r)
		}
	}
	return clip(strings.Join(uniq, "; "), 2000)
}

// pyBytes is python's repr of a bytes value: b'…' or b"…".
var pyBytes = regexp.MustCompile(`b'((?:[^'\\]|\\.)*)'|b"((?:[^"\\]|\\.)*)"`)

// decodePyBytes replaces python bytes reprs in s by their text, lines
// joined by "; ": frr-reload quotes vtysh's complaint that way.
func decodePyBytes(s string) string {
	return pyBytes.ReplaceAllStringFunc(s, func(m string) string {
		body := m[2 : len(m)-1]
		text, err := strconv.Unquote(`"` + strings.ReplaceAll(strings.ReplaceAll(body, `\'`, `'`), `"`, `\"`) + `"`)
		if err != nil {
			return m
		}
		var lines []string
		for _, l := range strings.Split(text, "\n") {
			if l = strings.Join(strings.Fields(l), " "); l != "" {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "; ")
	})
}
