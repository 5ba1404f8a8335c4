package cli

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestRolloutExitCode_MapsEachPhase(t *testing.T) {
	tests := []struct {
		given        sluicev1.RolloutPhase
		want         int
		wantTerminal bool
	}{
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, 0, false},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, 0, false},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, 0, true},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED, 5, true},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, 3, true},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, 4, true},
		{sluicev1.RolloutPhase_ROLLOUT_PHASE_UNSPECIFIED, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.given.String(), func(t *testing.T) {
			if got := rolloutExitCode(tt.given); got != tt.want {
				t.Errorf("exit code = %d, want %d", got, tt.want)
			}
			if got := contract.Terminal(tt.given); got != tt.wantTerminal {
				t.Errorf("terminal = %v, want %v", got, tt.wantTerminal)
			}
		})
	}
}

func TestProgressBar(t *testing.T) {
	tests := []struct {
		name        string
		done, total uint32
		want        string
	}{
		{"empty rollout", 0, 0, "[..........] 0/0"},
		{"nothing done", 0, 100, "[..........] 0/100"},
		{"rounds down", 35, 100, "[###.......] 35/100"},
		{"all done", 7, 7, "[##########] 7/7"},
		{"more than total is capped", 9, 7, "[##########] 9/7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := progressBar(tt.done, tt.total, 10); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func rolledBack() *sluicev1.Rollout {
	return &sluicev1.Rollout{
		Id: "4-bbbbbbbbbbbb", Revision: revB, PreviousRevision: revA, Generation: 4,
		Strategy: &sluicev1.Strategy{MaxParallel: "2"},
		Phase:    sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "2 nodes failed, budget 0: reverted 5 nodes",
		StartedAt: ago(2 * time.Minute), FinishedAt: ago(time.Minute),
		Counts: &sluicev1.RolloutCounts{Total: 10, Pending: 3, Provisioned: 5, Failed: 2, TimedOut: 1, Reverted: 5},
		Failures: []*sluicev1.NodeOutcome{
			{Node: "node-03", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Result: sluicev1.NodeResult_NODE_RESULT_INVALID,
				FailedCheck: "ping", Message: "10.0.0.1 unreachable", Output: "100% packet loss"},
			{Node: "node-07", Result: sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, FailedCheck: "deadline", Message: "no final report within the apply deadline 5m0s"},
		},
		Skipped: []*sluicev1.NodeOutcome{{Node: "node-09", Result: sluicev1.NodeResult_NODE_RESULT_SKIPPED}},
	}
}

func TestRolloutLines_EndWithTheOutcomeAndReason(t *testing.T) {
	lines := rolloutLines(rolledBack(), nil, now)
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		"rollout   4-bbbbbbbbbbbb (generation 4)",
		"revision  bbbbbbbbbbbb (from aaaaaaaaaaaa)",
		"strategy  max parallel 2, failure budget 0 (default)",
		"RolledBack, started 2m ago, ran 1m",
		"[###############...............] 5/10 provisioned",
		"pending 3, in progress 0, provisioned 5, failed 2 (1 timed out), skipped 0, reverting 0, reverted 5",
		"nodes that did not simply succeed:",
		"  NODE      RESULT      CHECK      MESSAGE",
		"  node-03   invalid     ping       10.0.0.1 unreachable | output: 100% packet loss",
		"  node-07   timed out   deadline   no final report within the apply deadline 5m0s",
		"  node-09   skipped     -          left during the rollout (not a failure)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if got, want := lines[len(lines)-1], "rollout 4-bbbbbbbbbbbb rolled back: 2 nodes failed, budget 0: reverted 5 nodes"; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
}

func TestRolloutLines_ShowTheStrategyAndStage(t *testing.T) {
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy: &sluicev1.Strategy{MaxParallel: "10%", FirstWave: 2, BakeTime: durationpb.New(time.Minute), FailureDomain: "zone",
			FailureBudget: "1", ApplyDeadline: durationpb.New(2 * time.Minute), RetryInvalid: true},
		Wave: 2, Domain: "0zone-b", BakeUntil: timestamppb.New(now.Add(40 * time.Second)), StartedAt: ago(time.Minute),
		Counts: &sluicev1.RolloutCounts{Total: 4, Provisioned: 1},
	}
	text := strings.Join(rolloutLines(r, nil, now), "\n")
	for _, want := range []string{
		"strategy  max parallel 10%, waves from 2 growing ×2 (default), one zone at a time, bake 1m0s, failure budget 1, apply deadline 2m0s, retrying invalid fingerprints",
		"stage     wave 2, zone zone-b, baking for 40s",
		"rollout 5-bbbbbbbbbbbb is progressing",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "NODE") {
		t.Errorf("a node table without failures:\n%s", text)
	}
}

// While a pause holds the bake, its countdown stands still: the status says
// it is held and how much is left, never "baking for" a time that is not
// counting down.
func TestRolloutLines_BakeHeldByThePause_SaysHowMuchIsLeft(t *testing.T) {
	r := &sluicev1.Rollout{
		Id: "5-bbbbbbbbbbbb", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy: &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(time.Minute)},
		Wave:     1, BakeLeft: durationpb.New(41*time.Second + 300*time.Millisecond), StartedAt: ago(time.Minute),
		Pause:    &sluicev1.PauseRequest{Rollout: "5-bbbbbbbbbbbb", Paused: true, Generation: 1, By: "ops"},
		PauseAck: &sluicev1.PauseAck{Generation: 1, Paused: true},
		Counts:   &sluicev1.RolloutCounts{Total: 3, Provisioned: 1, Pending: 2},
	}
	text := strings.Join(rolloutLines(r, nil, now), "\n")
	if want := "stage     wave 1, bake held by the pause: 41s of 1m0s left"; !strings.Contains(text, want) {
		t.Errorf("missing %q in:\n%s", want, text)
	}
	if strings.Contains(text, "baking for") {
		t.Errorf("a countdown while held:\n%s", text)
	}
	var stage string
	for _, l := range pipeLines(r) {
		if l.what == "stage" {
			stage = l.text
		}
	}
	if want := "  stage wave 1, bake held by the pause: 41s of 1m0s left"; stage != want {
		t.Errorf("pipe stage line %q, want %q", stage, want)
	}
}

func TestRolloutLines_SeveralFailureDomainsInProgress_NamesEachAndTheLimit(t *testing.T) {
	r := &sluicev1.Rollout{
		Id: "6-bbbbbbbbbbbb", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy: &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "zone", MaxUnprovenDomains: 3},
		Domain:   "0a", Domains: []string{"0a", "0b"}, StartedAt: ago(time.Minute),
		Counts: &sluicev1.RolloutCounts{Total: 6, InProgress: 4},
	}
	text := strings.Join(rolloutLines(r, nil, now), "\n")
	for _, want := range []string{
		"strategy  max parallel 10, up to 3 zone values at a time, failure budget 0 (default)",
		"stage     zone a, zone b (2 of at most 3 zone values unproven)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
}

func TestStageLine_BakeChecks_SaysHowManyPassedOnEveryNode(t *testing.T) {
	st := &sluicev1.Strategy{FirstWave: 1, BakeTime: durationpb.New(time.Minute), BakeChecks: 3}
	tests := []struct {
		name   string
		until  time.Time
		passed uint32
		want   string
	}{
		{"during the bake's time", now.Add(40 * time.Second), 2, "wave 1, baking for 40s, 2 of 3 checks passed on every node"},
		{"the time over, the re-runs not", now.Add(-time.Second), 2, "wave 1, baking: 2 of 3 checks passed on every node"},
		{"the time over and every re-run passed", now.Add(-time.Second), 3, "wave 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &sluicev1.Rollout{Strategy: st, Wave: 1, BakeUntil: timestamppb.New(tc.until), BakeChecksPassed: tc.passed}
			if got := stageLine(r, now); got != tc.want {
				t.Errorf("stageLine = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNodeLines_CutTheOutputAndListAtMostTen(t *testing.T) {
	r := &sluicev1.Rollout{Failures: []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INVALID,
		FailedCheck: "ping", Message: "failed", Output: strings.Repeat("x", 500) + "\nsecond line"}}}
	for range 12 {
		r.Skipped = append(r.Skipped, &sluicev1.NodeOutcome{Node: "n"})
	}
	lines := nodeLines(r, nil, now)
	if len(lines) != 13 { // title, header, ten rows, "and 3 more"
		t.Fatalf("got %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[2], "failed | output: "+strings.Repeat("x", outputWidth-1)+"…") || strings.Contains(lines[2], "second") {
		t.Errorf("output not cut: %q", lines[2])
	}
	if !strings.Contains(lines[3], "skipped") {
		t.Errorf("a node in the skipped list without a result is skipped: %q", lines[3])
	}
	if !strings.Contains(lines[12], "and 3 more") {
		t.Errorf("last line %q", lines[12])
	}
}

func TestDrawer_NotATerminal_PrintsOneLinePerChangeThenTheOutcomeLast(t *testing.T) {
	var out bytes.Buffer
	d := &drawer{w: &out}
	r := rolledBack()
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING
	d.draw(r, now)
	r = rolledBack()
	d.draw(r, now)
	d.finish(r, now)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8 { // two progress lines, title, header, three nodes, outcome
		t.Fatalf("got %d lines:\n%s", len(lines), out.String())
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("escape codes in non-terminal output: %q", out.String())
	}
	if !strings.Contains(lines[0], "4-bbbbbbbbbbbb Progressing") || !strings.Contains(lines[1], "RolledBack") {
		t.Errorf("progress lines: %q", lines[:2])
	}
	if !strings.HasPrefix(lines[7], "rollout 4-bbbbbbbbbbbb rolled back: ") {
		t.Errorf("last line %q", lines[7])
	}
}

// A rollout's record changes more often than its progress line: a watch
// piped to a file used to print the same line two or three times in a row.
func TestDrawer_NotATerminal_PrintsALineOnlyWhenItChanges(t *testing.T) {
	var out bytes.Buffer
	d := &drawer{w: &out}
	r := rolledBack()
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING
	d.draw(r, now)
	r.LeaderTime = durationpb.New(time.Minute) // not on the line
	d.draw(r, now.Add(time.Second))
	r.Failures = r.Failures[:1]
	d.draw(r, now.Add(2*time.Second))
	r.Counts.Provisioned++
	d.draw(r, now.Add(3*time.Second))
	d.draw(r, now.Add(4*time.Second))
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
	d.draw(r, now.Add(5*time.Second))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{"12:00:00 4-bbbbbbbbbbbb Progressing [##########..........] 5/10", "12:00:03 4-bbbbbbbbbbbb Progressing [############........] 6/10",
		"12:00:05 4-bbbbbbbbbbbb Reverting [############........] 6/10"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w+" ") {
			t.Errorf("line %d %q, want it to start with %q", i, lines[i], w)
		}
	}
}

// The help's exit codes are the codes the command returns: each outcome is
// listed under rolloutExitCode of the phase the coordinator ends it in.
func TestRolloutStatusHelp_ListsEachOutcomeUnderItsExitCode(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), []string{"rollout", "status", "--help"}, Streams{Out: &out, Err: &out}, "test"); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, out.String())
	}
	_, block, ok := strings.Cut(out.String(), "Exit codes")
	if !ok {
		t.Fatalf("no exit codes in the help:\n%s", out.String())
	}
	block, _, _ = strings.Cut(block, "\n\n")
	byCode := map[int]string{} // exit code → its text, continuation lines joined
	code := -1
	for _, l := range strings.Split(block, "\n")[1:] {
		f := strings.Fields(l)
		if n, err := strconv.Atoi(f[0]); err == nil {
			code, f = n, f[1:]
		}
		byCode[code] += " " + strings.Join(f, " ")
	}
	tests := []struct {
		outcome string
		phase   sluicev1.RolloutPhase
		want    string
	}{
		{"succeeded", sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, "succeeded"},
		{"still progressing", sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, "still progressing"},
		{"reverting", sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, "reverting"},
		{"partially failed", sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED, "partially failed"},
		{"rolled back", sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, "rolled back"},
		{"aborted by an operator", sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "stopped by an operator"},
		{"superseded", sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "superseded"},
		// The coordinator ends a rollout refused for a known-bad target
		// ABORTED (rollout.State.refuseKnownBad, then maybeFinish).
		{"refused", sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "refused"},
		{"past its progress deadline", sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "progress deadline"},
		{"an unknown phase", sluicev1.RolloutPhase_ROLLOUT_PHASE_UNSPECIFIED, "phase is unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			code := rolloutExitCode(tt.phase)
			if !strings.Contains(byCode[code], tt.want) {
				t.Errorf("exit %d is listed as %q, which does not say %q", code, byCode[code], tt.want)
			}
			for other, text := range byCode {
				if other != code && strings.Contains(text, tt.want) {
					t.Errorf("%q is also listed under exit %d: %q", tt.want, other, text)
				}
			}
		})
	}
	if !strings.Contains(byCode[exitInterrupted], "interrupted") {
		t.Errorf("exit %d is listed as %q", exitInterrupted, byCode[exitInterrupted])
	}
}

func TestDrawer_Terminal_RedrawsTheBlockInPlace(t *testing.T) {
	var out bytes.Buffer
	d := &drawer{w: &out, tty: true, widths: terminalWidths}
	r := rolledBack()
	d.draw(r, now)
	first := out.Len()
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("first draw moves the cursor: %q", out.String())
	}
	d.draw(r, now)
	d.finish(r, now)
	second := out.String()[first:]
	lines := len(rolloutLines(r, nil, now))
	if want := "\x1b[" + strconv.Itoa(lines) + "F\x1b[J"; !strings.HasPrefix(second, want) {
		t.Errorf("redraw starts with %q, want %q", second[:min(12, len(second))], want)
	}
	if !strings.HasSuffix(second, outcomeLine(r)+"\n") {
		t.Errorf("outcome is not the last line: %q", second)
	}
}

func TestOutcomeLine_StatesTheReason_OrTheFirstFailureWhenTheRecordHasNone(t *testing.T) {
	noReason := rolledBack()
	noReason.Reason = ""
	progressing := rolledBack()
	progressing.Phase, progressing.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, ""
	timedOut := rolledBack()
	timedOut.Reason, timedOut.Failures = "", timedOut.Failures[1:]
	reverting := rolledBack()
	reverting.Phase, reverting.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, "node-03 failed check ping: 10.0.0.1 unreachable; 1 failure(s) exceed the failure budget of 0"
	tests := []struct {
		name  string
		given *sluicev1.Rollout
		want  string
	}{
		{"the record's reason", rolledBack(), "rollout 4-bbbbbbbbbbbb rolled back: 2 nodes failed, budget 0: reverted 5 nodes"},
		{"no reason: the first failure", noReason, "rollout 4-bbbbbbbbbbbb rolled back: node-03 failed check ping: 10.0.0.1 unreachable"},
		{"no reason: a timeout", timedOut, "rollout 4-bbbbbbbbbbbb rolled back: node-07 timed out: no final report within the apply deadline 5m0s"},
		{"still progressing without a reason", progressing, "rollout 4-bbbbbbbbbbbb is progressing"},
		{"reverting", reverting, "rollout 4-bbbbbbbbbbbb is reverting the nodes it touched: node-03 failed check ping: 10.0.0.1 unreachable; 1 failure(s) exceed the failure budget of 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := outcomeLine(tt.given); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestLiveState_SaysWhereANodeIsWithItsDesiredConfig(t *testing.T) {
	desired := func(revert bool, written *timestamppb.Timestamp) *sluicev1.DesiredConfig {
		return &sluicev1.DesiredConfig{Node: "node-01", Fingerprint: fpX, Revert: revert, WrittenAt: written}
	}
	status := func(p sluicev1.NodePhase, fp string) *sluicev1.NodeStatus {
		return &sluicev1.NodeStatus{Node: "node-01", Phase: p, Fingerprint: fp, ApplyStartedAt: ago(20 * time.Second),
			FailedCheck: "ping", Message: "unreachable", CheckOutput: "100% loss"}
	}
	const (
		provisioning = sluicev1.NodePhase_NODE_PHASE_PROVISIONING
		provisioned  = sluicev1.NodePhase_NODE_PHASE_PROVISIONED
		invalid      = sluicev1.NodePhase_NODE_PHASE_INVALID
	)
	tests := []struct {
		name  string
		given liveNode
		want  string // result|check|message|output; "" = not shown
	}{
		{"no status yet", liveNode{desired: desired(false, ago(time.Minute))}, "in progress||written 1m ago; the agent has not acknowledged it|"},
		{"status of an older config", liveNode{desired: desired(false, ago(time.Minute)), status: status(provisioned, fpOther)}, "in progress||written 1m ago; the agent has not acknowledged it|"},
		{"no write time", liveNode{desired: desired(false, nil), status: nil}, "in progress||the agent has not acknowledged it|"},
		{"applying", liveNode{desired: desired(false, nil), status: status(provisioning, fpX)}, "in progress||applying for 20s|"},
		{"applying, with progress and a deadline", liveNode{
			desired: &sluicev1.DesiredConfig{Node: "node-01", Fingerprint: fpX, Deadline: durationpb.New(5 * time.Minute)},
			status:  &sluicev1.NodeStatus{Phase: provisioning, Fingerprint: fpX, ApplyStartedAt: ago(20 * time.Second), Progress: "check 2 of 3: ping"}},
			"in progress||check 2 of 3: ping; applying for 20s (deadline 5m0s)|"},
		{"provisioned: simply succeeded", liveNode{desired: desired(false, nil), status: status(provisioned, fpX)}, ""},
		{"invalid, not yet recorded", liveNode{desired: desired(false, nil), status: status(invalid, fpX)}, "invalid|ping|unreachable|100% loss"},
		{"revert not acknowledged", liveNode{desired: desired(true, ago(time.Minute)), status: status(invalid, fpOther)}, "reverting||backup cccccccccccc written 1m ago; the agent has not acknowledged it|"},
		{"revert applying", liveNode{desired: desired(true, nil), status: status(provisioning, fpX)}, "reverting||applying its backup for 20s|"},
		{"reverted", liveNode{desired: desired(true, nil), status: status(provisioned, fpX)}, "reverted||backup cccccccccccc is in force again|"},
		{"revert failed", liveNode{desired: desired(true, nil), status: status(invalid, fpX)}, "revert failed|ping|unreachable|100% loss"},
		{"status unreadable", liveNode{desired: desired(false, nil), unreadable: "<unreadable: sluice-status/n1 value does not decode>"},
			"unreadable||<unreadable: sluice-status/n1 value does not decode>|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, check, msg, out, show := liveState(tt.given, now)
			got := ""
			if show {
				got = strings.Join([]string{res, check, msg, out}, "|")
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestNodeLines_RecordFirstThenLiveNodesByName_OneRowPerNode(t *testing.T) {
	r := rolledBack()
	live := []liveNode{
		{desired: &sluicev1.DesiredConfig{Node: "node-12", Fingerprint: fpX}, status: nil},
		{desired: &sluicev1.DesiredConfig{Node: "node-03", Fingerprint: fpX, Revert: true}, status: &sluicev1.NodeStatus{Fingerprint: fpX, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING}},
		{desired: &sluicev1.DesiredConfig{Node: "node-11", Fingerprint: fpX}, status: &sluicev1.NodeStatus{Fingerprint: fpX, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}},
		{desired: &sluicev1.DesiredConfig{Node: "node-10", Fingerprint: fpX}, status: nil},
	}
	var nodes []string
	for _, l := range nodeLines(r, live, now)[2:] {
		nodes = append(nodes, strings.Join(strings.Fields(l)[:2], " "))
	}
	// The rollout stopped: its nodes still on their forward config were in flight.
	want := []string{"node-03 invalid,", "node-07 timed", "node-09 skipped", "node-10 stopped", "node-12 stopped"}
	if strings.Join(nodes, "|") != strings.Join(want, "|") {
		t.Errorf("rows %q, want %q", nodes, want)
	}
	if l := nodeLines(r, live, now)[2]; !strings.Contains(l, "invalid, reverting") {
		t.Errorf("the failed node's revert is not on its row: %q", l)
	}
}

// The outcome line is never cut (the decisive part of a reason is often
// last), and an event whose reason holds a check's multi-line output is one line.
func TestOutcomeAndEventLines_KeepTheWholeReasonOnOneLine(t *testing.T) {
	reason := strings.Repeat("node node-03 failed check connectivity: ping 10.0.0.1 via mgmt: 100% packet loss; ", 4) +
		"1 failure(s) exceed the failure budget of 0"
	r := &sluicev1.Rollout{Id: "2-abc", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: reason}
	if got := outcomeLine(r); !strings.HasSuffix(got, "exceed the failure budget of 0") {
		t.Errorf("outcome line cut: %q", got)
	}
	ev := &sluicev1.Event{Type: "NodeFailed", Kind: "node", Id: "node-03", Reason: "check connectivity failed:\nPING 10.0.0.1\n100% packet loss\n"}
	if got := eventLine(ev, time.Now()); strings.Contains(got, "\n") || !strings.Contains(got, "PING 10.0.0.1 100% packet loss") {
		t.Errorf("event line %q: want one line holding the whole reason", got)
	}
}

func TestStagesLine_SumsUpEachStage(t *testing.T) {
	r := &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Stages: []*sluicev1.StageResult{
		{Wave: 1, StartedAt: ago(time.Minute), EndedAt: ago(50 * time.Second), Nodes: 2, Provisioned: 2},
		{Wave: 2, StartedAt: ago(50 * time.Second), EndedAt: ago(10 * time.Second), Nodes: 3, Provisioned: 1, Failed: 1, Skipped: 1},
		{Wave: 3, StartedAt: ago(10 * time.Second)},
	}}
	want := "wave 1: 2/2 provisioned; wave 2: 1/3 provisioned, 1 failed, 1 skipped; wave 3: running"
	if got := stagesLine(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK
	if got := stagesLine(r); !strings.HasSuffix(got, "wave 3: stopped") {
		t.Errorf("ended rollout: got %q; want its last stage stopped", got)
	}
}

// A stage that has not ended shows its results so far, from the rollout's
// counts now and at its start: "wave 1 running 0/0" while 1 of its 2
// nodes was provisioned added nothing up.
func TestStages_RunningStage_ShowsItsResultsSoFar(t *testing.T) {
	r := &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Id: "2-abc", Generation: 2,
		Counts: &sluicev1.RolloutCounts{Total: 5, Attempted: 4, Provisioned: 3, InProgress: 1, Pending: 1},
		Stages: []*sluicev1.StageResult{
			{Wave: 1, StartedAt: ago(time.Minute), EndedAt: ago(50 * time.Second), Nodes: 2, Provisioned: 2},
			{Wave: 2, StartedAt: ago(50 * time.Second), StartedBefore: 2,
				CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Attempted: 2, Provisioned: 2, Pending: 3}},
		}}
	if got, want := stagesLine(r), "wave 1: 2/2 provisioned; wave 2: running, 1/2 provisioned so far, 1 in progress"; got != want {
		t.Errorf("stagesLine:\n got  %q\n want %q", got, want)
	}
	rows := history{items: []*sluicev1.Rollout{r}, active: r.Id}.table(time.Now())
	if got := rows[len(rows)-1]; got[1] != "wave 2" || got[3] != "running" || got[6] != "1/2" {
		t.Errorf("history's row of the running stage: %q; want wave 2, running, 1/2", got)
	}
}

// Once a rollout stopped, its counts still add up to the total: the nodes
// in flight and still pending are shown apart.
func TestCountsLine_StoppedRollout_AddsUpToTheTotal(t *testing.T) {
	c := &sluicev1.RolloutCounts{Total: 5, Provisioned: 1, Failed: 1, Stopped: 1, NotStarted: 2, Reverted: 3}
	want := "pending 0, in progress 0, provisioned 1, failed 1, skipped 0, stopped in flight 1, not started 2, reverting 0, reverted 3"
	if got := countsLine(&sluicev1.Rollout{Counts: c}); got != want {
		t.Errorf("countsLine:\n got  %q\n want %q", got, want)
	}
}

// Nodes skipped because their agent cannot read the config are said apart
// from nodes that left (issue 38 item 2).
func TestCountsLine_IncompatibleNodes_SaidApartFromTheSkipped(t *testing.T) {
	c := &sluicev1.RolloutCounts{Total: 4, Provisioned: 2, Skipped: 2, Incompatible: 1}
	want := "pending 0, in progress 0, provisioned 2, failed 0, skipped 2 (1: their agent cannot read the config)"
	if got := countsLine(&sluicev1.Rollout{Counts: c}); got != want {
		t.Errorf("countsLine:\n got  %q\n want %q", got, want)
	}
}

// TestStages_StoppedRollout_LastStageAddsUp (sluice issue 42): the stage
// open when a rollout stopped counted only provisioned and failed of the
// nodes it started ("wave 2: 1/4 provisioned, 1 failed"); its node in
// flight is stopped in flight, one that left after it started skipped
// (the rollout's skipped also counted a wave-3 node that left before it
// started), so the row adds up to the 4, in rollout status and in rollout
// history.
func TestStages_StoppedRollout_LastStageAddsUp(t *testing.T) {
	r := &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Id: "2-abc", Generation: 2,
		StartedAt: ago(time.Minute), FinishedAt: ago(10 * time.Second),
		Counts: &sluicev1.RolloutCounts{Total: 10, Attempted: 6, Provisioned: 3, Failed: 1, Skipped: 2, Stopped: 1, NotStarted: 3, Reverted: 5},
		Stages: []*sluicev1.StageResult{
			{Wave: 1, StartedAt: ago(time.Minute), EndedAt: ago(50 * time.Second), Nodes: 2, Provisioned: 2,
				CountsAtStart: &sluicev1.RolloutCounts{Total: 10, Pending: 10}},
			{Wave: 2, StartedAt: ago(50 * time.Second), EndedAt: ago(10 * time.Second), Nodes: 4, Provisioned: 1, Failed: 1, Skipped: 2,
				CountsAtStart: &sluicev1.RolloutCounts{Total: 10, Attempted: 2, Provisioned: 2, Pending: 8}, StartedBefore: 2},
		}}
	if got, want := stagesLine(r), "wave 1: 2/2 provisioned; wave 2: 1/4 provisioned, 1 failed, 1 skipped, 1 stopped in flight"; got != want {
		t.Errorf("stagesLine:\n got  %q\n want %q", got, want)
	}
	rows := history{items: []*sluicev1.Rollout{r}}.table(time.Now())
	if got := rows[len(rows)-1]; got[1] != "wave 2" || got[6] != "1/4" || got[7] != "1" || got[8] != "skipped 1, stopped in flight 1" {
		t.Errorf("history's row of wave 2: %q; want 1/4, 1 failed, other skipped 1, stopped in flight 1", got)
	}
}

// screen replays what a terminal shows of out: lines, "\x1b[nF" (up n
// lines, to the start) and "\x1b[J" (clear to the end of the screen).
func screen(out string) []string {
	var rows []string
	row := 0
	for len(out) > 0 {
		if m := regexp.MustCompile(`^\x1b\[(\d+)F`).FindStringSubmatch(out); m != nil {
			n, _ := strconv.Atoi(m[1])
			row = max(row-n, 0)
			out = out[len(m[0]):]
			continue
		}
		if strings.HasPrefix(out, "\x1b[J") {
			rows = rows[:min(row, len(rows))]
			out = out[3:]
			continue
		}
		line, rest, _ := strings.Cut(out, "\n")
		if i := strings.Index(line, "\x1b"); i >= 0 {
			line, rest = line[:i], out[i:]
		} else {
			out = rest
			if row < len(rows) {
				rows[row] = line
			} else {
				rows = append(rows, line)
			}
			row++
			continue
		}
		out = rest
	}
	return rows
}

// A note said while a watch redraws its block in place (no coordinator
// leads, the connection moved) stays on the terminal above the block: a
// line written between two redraws was overwritten by the next.
func TestDrawer_Terminal_NoteStaysAboveTheRedrawnBlock(t *testing.T) {
	var out bytes.Buffer
	d := &drawer{w: &out, tty: true, widths: terminalWidths}
	r := rolledBack()
	d.draw(r, now)
	d.note("12:00:00 no coordinator holds the lease")
	d.draw(r, now)
	d.draw(r, now)
	rows := screen(out.String())
	block := rolloutLines(r, nil, now)
	if len(rows) != len(block)+1 || rows[0] != "12:00:00 no coordinator holds the lease" || rows[len(rows)-1] != outcomeLine(r) {
		t.Errorf("the terminal shows:\n%s\nwant the note, then the block of %d lines", strings.Join(rows, "\n"), len(block))
	}
	// Written as a watch wrote a note before: overwritten by the next redraw.
	out.Reset()
	d = &drawer{w: &out, tty: true, widths: terminalWidths}
	d.draw(r, now)
	fmt.Fprintln(&out, "12:00:00 no coordinator holds the lease")
	d.draw(r, now)
	if rows := screen(out.String()); strings.Contains(strings.Join(rows, "\n"), "no coordinator") {
		t.Errorf("screen() does not replay a redraw over a line written between two: %q", rows)
	}
}
