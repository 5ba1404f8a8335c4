package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// controlRequest is POST /api/v1/control's body. Without confirm the
// answer only says which `sluice` command the control is (the page shows it
// for confirmation); with confirm it runs that command.
type controlRequest struct {
	Action      string `json:"action"`
	Rollout     string `json:"rollout,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Revision    string `json:"revision,omitempty"` // undo: the revision to go back to (default: the CLI's)
	Reason      string `json:"reason,omitempty"`
	NoRevert    bool   `json:"noRevert,omitempty"`
	Confirm     bool   `json:"confirm,omitempty"`
}

// controlAnswer says the command, and with confirm what it printed.
type controlAnswer struct {
	Command string `json:"command"`
	Ran     bool   `json:"ran"`
	Output  string `json:"output,omitempty"`
}

// actions maps each control to the CLI command it is.
var actions = map[string]func(c controlRequest) ([]string, *apiError){
	"pause":  func(c controlRequest) ([]string, *apiError) { return withReason([]string{"pause"}, c), nil },
	"resume": func(c controlRequest) ([]string, *apiError) { return withReason([]string{"resume"}, c), nil },
	"rollout-pause": func(c controlRequest) ([]string, *apiError) {
		return withReason(withRollout([]string{"rollout", "pause"}, c), c), nil
	},
	"rollout-resume": func(c controlRequest) ([]string, *apiError) {
		return withReason(withRollout([]string{"rollout", "resume"}, c), c), nil
	},
	"abort": func(c controlRequest) ([]string, *apiError) {
		args := withReason(withRollout([]string{"rollout", "abort"}, c), c)
		if c.NoRevert {
			args = append(args, "--no-revert")
		}
		return args, nil
	},
	"undo": func(c controlRequest) ([]string, *apiError) {
		if c.Revision == "" {
			return []string{"rollout", "undo"}, nil
		}
		if !revisionPrefix.MatchString(c.Revision) {
			return nil, &apiError{Field: "revision", Error: "revision " + quote(c.Revision) + ": give a revision id or a prefix of at least 6 hex characters (sluice get revisions lists them)"}
		}
		return []string{"rollout", "undo", "--to-revision", c.Revision}, nil
	},
	"retry": func(controlRequest) ([]string, *apiError) { return []string{"rollout", "retry"}, nil },
	"forgive": func(c controlRequest) ([]string, *apiError) {
		if !fingerprintPrefix.MatchString(c.Fingerprint) {
			return nil, &apiError{Field: "fingerprint", Error: "fingerprint " + quote(c.Fingerprint) + ": give at least 6 hex characters (sluice get fingerprints shows 12)"}
		}
		if strings.TrimSpace(c.Reason) == "" {
			return nil, &apiError{Field: "reason", Error: "reason is required to forgive: say why the config may be tried again"}
		}
		return withReason([]string{"fingerprint", "forgive", c.Fingerprint}, c), nil
	},
}

var fingerprintPrefix = regexp.MustCompile(`^[0-9a-f]{6,64}$`)

// revisionPrefix is a revision id or its prefix (ids are hex hashes).
var revisionPrefix = regexp.MustCompile(`^[0-9a-f]{6,64}$`)

func withRollout(args []string, c controlRequest) []string {
	if c.Rollout != "" {
		args = append(args, c.Rollout)
	}
	return args
}

func withReason(args []string, c controlRequest) []string {
	if r := strings.TrimSpace(c.Reason); r != "" {
		args = append(args, "--reason", r)
	}
	return args
}

// controlArgs checks a request and returns the CLI arguments it runs.
func controlArgs(c controlRequest) ([]string, *apiError) {
	build, ok := actions[c.Action]
	if !ok {
		names := make([]string, 0, len(actions))
		for n := range actions {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, &apiError{Field: "action", Error: fmt.Sprintf("action %s: want one of %s", quote(c.Action), strings.Join(names, ", "))}
	}
	if c.Rollout != "" && !validName.MatchString(c.Rollout) {
		return nil, &apiError{Field: "rollout", Error: "rollout " + quote(c.Rollout) + " is not a rollout id (sluice get rollouts lists them)"}
	}
	if len(c.Reason) > 1000 {
		return nil, &apiError{Field: "reason", Error: "reason is longer than 1000 characters"}
	}
	if strings.ContainsAny(c.Reason, "\x00\r") {
		return nil, &apiError{Field: "reason", Error: "reason may not hold NUL or carriage-return characters"}
	}
	return build(c)
}

// CommandLine prints args as a shell command line starting with sluice.
func CommandLine(args []string) string {
	parts := []string{"sluice"}
	for _, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r))
		}) < 0 {
			parts = append(parts, a)
			continue
		}
		parts = append(parts, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return strings.Join(parts, " ")
}

func (srv *Server) who() string {
	if srv.opts.Who == "" {
		return "the dashboard"
	}
	return srv.opts.Who
}

// record publishes the control as an event naming who ran it, from which
// address, and how it went (kind control, id the action): the requests the
// command wrote name who as well, where they have a field for it (pause,
// abort, forgive); undo and retry have none, so this event is their record.
func (srv *Server) record(ctx context.Context, r *http.Request, c controlRequest, command string, err error) {
	ev := &sluicev1.Event{Kind: contract.KindControl, Id: c.Action, Type: "ControlRan", Rollout: c.Rollout, Fingerprint: c.Fingerprint,
		Reason: fmt.Sprintf("%s from %s ran %s", srv.who(), r.RemoteAddr, command)}
	if err != nil {
		ev.Type, ev.Reason = "ControlFailed", ev.Reason+": "+err.Error()
	}
	em := events.NewEmitter(srv.opts.JS, zerolog.Nop(), contract.ComponentCLI, nil)
	em.Emit(ev)
	em.Flush(ctx)
}

// controlTimeout bounds a control: the CLI's own waits for the coordinator
// (15 s for abort and forgive) fit in it.
const controlTimeout = 30 * time.Second

// handleControl is POST /api/v1/control.
func (srv *Server) handleControl(w http.ResponseWriter, r *http.Request) {
	var c controlRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		httpError(w, http.StatusBadRequest, "body", "the body is not a control request ({action, rollout, fingerprint, revision, reason, noRevert, confirm}): "+err.Error())
		return
	}
	args, bad := controlArgs(c)
	if bad != nil {
		writeJSON(w, http.StatusBadRequest, bad)
		return
	}
	a := controlAnswer{Command: CommandLine(args)}
	if !c.Confirm {
		writeJSON(w, http.StatusOK, a)
		return
	}
	switch {
	case srv.opts.Readonly != "":
		httpError(w, http.StatusForbidden, "action", "controls are disabled: "+srv.opts.Readonly)
		return
	case srv.opts.Run == nil:
		httpError(w, http.StatusForbidden, "action", "controls are disabled: this dashboard runs without controls")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
	defer cancel()
	out, err := srv.opts.Run(ctx, args)
	a.Output, a.Ran = strings.TrimSpace(out), true
	srv.opts.Logf("dashboard: %s ran %s: err=%v", srv.who(), a.Command, err)
	srv.record(ctx, r, c, a.Command, err)
	if err != nil {
		writeJSON(w, http.StatusConflict, struct {
			controlAnswer
			Error string `json:"error"`
		}{a, err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, a)
}
