package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// drawer shows successive states of a rollout: on a terminal it redraws the
// block in place; otherwise (a pipe, a CI log) it prints, after the time,
// each line of pipeLines that changed.
type drawer struct {
	w      io.Writer
	tty    bool
	widths cellWidths        // the node table's cuts on the terminal (-o wide: none)
	mu     sync.Mutex        // draw and note: a note may come from the connection's goroutine
	lines  int               // lines of the last block drawn on the terminal
	block  string            // that block
	last   map[string]string // pipeLines last printed when not on a terminal, by what each says
}

// restart makes d draw the next rollout from scratch, below what it drew.
func (d *drawer) restart() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines, d.block, d.last = 0, "", nil
}

// note writes line: in a pipe after what was printed, on a terminal above
// the block, which is drawn again below it (the next redraw in place
// would otherwise overwrite the note).
func (d *drawer) note(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty || d.lines == 0 {
		fmt.Fprintln(d.w, line)
		return
	}
	fmt.Fprintf(d.w, "\x1b[%dF\x1b[J%s\n%s", d.lines, line, d.block)
}

func (d *drawer) draw(r *sluicev1.Rollout, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty {
		// The record changes more often than these lines show (its leader
		// time, a failure's details): a line is printed only when it differs.
		if d.last == nil {
			d.last = map[string]string{}
		}
		for _, l := range pipeLines(r) {
			if l.text != d.last[l.what] {
				d.last[l.what] = l.text
				if l.text != "" {
					fmt.Fprintln(d.w, now.Format(time.TimeOnly)+" "+l.text)
				}
			}
		}
		return
	}
	var b strings.Builder
	lines := rolloutBlock(r, nil, now, d.widths)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	back := ""
	if d.lines > 0 {
		// Back to the start of the last block, then clear to the end of the screen.
		back = fmt.Sprintf("\x1b[%dF\x1b[J", d.lines)
	}
	d.lines, d.block = len(lines), b.String()
	_, _ = io.WriteString(d.w, back+d.block)
}

// pipeLine is one thing a watch that is not on a terminal says, and what
// it says now ("" for nothing).
type pipeLine struct{ what, text string }

// pipeLines is what a watch in a pipe prints of r, each line when it
// changes: the progress line, the leader's term, the stage (with the bake's
// end as a time, not a countdown that would change with every record),
// the pause, each gate's last verdict, what blocks the rollout, and each
// stage once it ended.
func pipeLines(r *sluicev1.Rollout) []pipeLine {
	lines := []pipeLine{{"progress", progress(r)}}
	if e := r.GetLeaderEpoch(); e > 0 {
		lines = append(lines, pipeLine{"term", fmt.Sprintf("  led by the coordinator of term %d", e)})
	}
	var stage []string
	if !contract.Terminal(r.GetPhase()) {
		if r.GetWave() > 0 {
			stage = append(stage, fmt.Sprintf("wave %d", r.GetWave()))
		}
		if ds := r.GetDomains(); len(ds) > 1 {
			stage = append(stage, domainsStage(r, ds))
		} else if dm := r.GetDomain(); dm != "" {
			stage = append(stage, domainStage(r, dm))
		}
		if held := bakeHeld(r); held != "" {
			stage = append(stage, held)
		} else if b := r.GetBakeUntil(); b != nil {
			bake := "baking until " + b.AsTime().Local().Format(time.TimeOnly)
			if want := r.GetStrategy().GetBakeChecks(); want > 0 {
				bake += fmt.Sprintf(", %d of %d checks passed on every node", r.GetBakeChecksPassed(), want)
			}
			stage = append(stage, bake)
		}
		if w := r.GetWaiting(); w != "" {
			if u := r.GetWaitingUntil(); u != nil {
				w += " (until " + u.AsTime().Local().Format(time.TimeOnly) + ")"
			}
			stage = append(stage, w)
		}
	}
	if len(stage) > 0 {
		lines = append(lines, pipeLine{"stage", "  stage " + strings.Join(stage, ", ")})
	} else {
		lines = append(lines, pipeLine{"stage", ""})
	}
	if p := pauseLine(r); p != "" {
		lines = append(lines, pipeLine{"pause", "  paused " + p})
	} else {
		lines = append(lines, pipeLine{"pause", ""})
	}
	for _, g := range r.GetGates() {
		what := g.GetVerdict()
		if b := g.GetBefore(); b != "" {
			what += " before " + b
		}
		lines = append(lines, pipeLine{"gate " + g.GetGate(), fmt.Sprintf("  gate %s (%s)", g.GetMessage(), what)})
	}
	if b := r.GetBlockedBy(); b != nil {
		lines = append(lines, pipeLine{"blocked", "  blocked by gate " + b.GetMessage()})
	}
	for _, st := range r.GetStages() {
		if st.GetEndedAt() == nil {
			continue
		}
		done := fmt.Sprintf("  %s done: %s", stageName(r, st), stageCounts(contract.StageTallyOf(r, st), ""))
		lines = append(lines, pipeLine{"ended " + stageName(r, st), done})
	}
	return lines
}

// finish prints what the last draw left out, so the outcome is the last line.
func (d *drawer) finish(r *sluicev1.Rollout, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tty {
		return // the block ends with the outcome
	}
	writeLines(d.w, append(nodeTable(r, nil, now, widthsFor(false)), outcomeLine(r)))
}
