package cli

import (
	"bytes"
	"cmp"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// tallyRecords are records as the coordinator writes them, each adding up
// to its total: one that was aborted with nodes in flight and nodes never
// started, one rolled back, one still running.
func tallyRecords() []*sluicev1.Rollout {
	return []*sluicev1.Rollout{
		{Id: "3-cccccccccccc", Revision: revA, Generation: 3, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Reason: "head moved",
			StartedAt: ago(time.Minute), Counts: &sluicev1.RolloutCounts{Total: 12, Pending: 5, InProgress: 2, Provisioned: 4, Failed: 1, Attempted: 7}},
		{Id: "2-bbbbbbbbbbbb", Revision: revB, Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Reason: "node-03 failed",
			StartedAt: ago(time.Hour), FinishedAt: ago(58 * time.Minute),
			Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 2, Failed: 2, TimedOut: 1, Skipped: 1, Incompatible: 1, Stopped: 2, NotStarted: 3,
				Attempted: 6, Reverted: 5, RevertFailed: 1}},
		{Id: "1-aaaaaaaaaaaa", Revision: revA, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, Reason: "aborted by ops",
			StartedAt: ago(2 * time.Hour), FinishedAt: ago(110 * time.Minute),
			Counts: &sluicev1.RolloutCounts{Total: 9, Provisioned: 3, Stopped: 2, NotStarted: 4, Attempted: 5}},
	}
}

// TestRolloutTables_ForwardCountsAddUpToTheTotal: 'get rollouts' (table
// and wide) and 'rollout history' print every forward category of each
// record, stopped in flight and not started included, so that a row's
// numbers add up to its total and each is contract.TallyOf's.
func TestRolloutTables_ForwardCountsAddUpToTheTotal(t *testing.T) {
	records := tallyRecords()
	tests := []struct {
		name   string
		given  listing
		format string
	}{
		{"get rollouts", rolloutList{items: records, active: records[0].GetId()}, formatTable},
		{"get rollouts -o wide", rolloutList{items: records, active: records[0].GetId()}, formatWide},
		{"rollout history", history{items: records, active: records[0].GetId()}, formatTable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printListing(&out, tt.given, nil, tt.format, now); err != nil {
				t.Fatal(err)
			}
			rows := printedRows(t, out.String())
			if len(rows) != len(records) {
				t.Fatalf("%d rows, want %d:\n%s", len(rows), len(records), out.String())
			}
			for _, r := range records {
				row := rowOf(t, rows, r.GetId())
				total, got := printedTally(t, row)
				want := contract.TallyOf(r)
				var sum uint32
				for _, c := range want.Nodes {
					sum += got[c.Key]
					if got[c.Key] != c.N {
						t.Errorf("%s: %s printed %d, TallyOf %d\n%s", r.GetId(), c.Words, got[c.Key], c.N, out.String())
					}
				}
				if total != want.Total || sum != total {
					t.Errorf("%s: the printed counts add up to %d of the printed total %d; TallyOf's total %d\n%s",
						r.GetId(), sum, total, want.Total, out.String())
				}
			}
		})
	}
}

// printedRows reads a printed table back: each row's cells by the header
// above them (the columns are aligned), up to the footer.
func printedRows(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.Split(strings.TrimSuffix(out, "\n"), "\n\n")[0], "\n")
	var names []string
	var starts []int
	for _, m := range regexp.MustCompile(`\S+`).FindAllStringIndex(lines[0], -1) {
		names, starts = append(names, lines[0][m[0]:m[1]]), append(starts, m[0])
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		rs, row := []rune(line), map[string]string{}
		for i, name := range names {
			end := len(rs)
			if i+1 < len(starts) {
				end = min(starts[i+1], len(rs))
			}
			if starts[i] < end {
				row[name] = strings.TrimSpace(string(rs[starts[i]:end]))
			}
		}
		if row[names[0]] != "" {
			rows = append(rows, row) // not a stage's row
		}
	}
	return rows
}

// rowOf is the row of rollout id.
func rowOf(t *testing.T, rows []map[string]string, id string) map[string]string {
	t.Helper()
	for _, row := range rows {
		if strings.TrimSuffix(cmp.Or(row["ROLLOUT"], row["ID"]), " (active)") == id {
			return row
		}
	}
	t.Fatalf("no row of %s in %v", id, rows)
	return nil
}

// printedTally is the total and the forward counts a row prints: its
// PROVISIONED/TOTAL, a column per category headed by its words, and the
// OTHER cell's "words N" parts.
func printedTally(t *testing.T, row map[string]string) (uint32, map[string]uint32) {
	t.Helper()
	num := func(s string) uint32 {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatalf("%q is not a count: %v (row %v)", s, err, row)
		}
		return uint32(n)
	}
	got := map[string]uint32{}
	prov, total, ok := strings.Cut(row["PROVISIONED/TOTAL"], "/")
	if !ok {
		t.Fatalf("PROVISIONED/TOTAL %q", row["PROVISIONED/TOTAL"])
	}
	got[contract.CountProvisioned] = num(prov)
	for _, c := range contract.TallyOf(nil).Nodes {
		if cell, ok := row[countColumn(c.Key)]; ok {
			got[c.Key] += num(cell)
		}
	}
	if other := row[otherColumn]; other != "" && other != none {
		for _, part := range strings.Split(other, ", ") {
			i := strings.LastIndexByte(part, ' ')
			key := ""
			for _, c := range contract.Categories {
				if i > 0 && c.Words == part[:i] {
					key = c.Key
				}
			}
			if key == "" {
				t.Fatalf("OTHER %q: %q is not a category's words and count", other, part)
			}
			got[key] += num(part[i+1:])
		}
	}
	return num(total), got
}

// TestAbortLine_CountsAsTallyOf: what 'rollout abort' says once a
// coordinator acted counts as contract.TallyOf does: the revert puts back
// every touched node (reverting, reverted and revert failed), and the
// nodes that never start are said, so that the line's counts and the
// record's agree.
func TestAbortLine_CountsAsTallyOf(t *testing.T) {
	by := &sluicev1.AbortRequest{}
	tests := []struct {
		name     string
		given    *sluicev1.RolloutCounts
		noRevert bool
		want     string
	}{
		{name: "reverting: the touched nodes are reverting, reverted and revert failed",
			given: &sluicev1.RolloutCounts{Total: 10, Provisioned: 3, Failed: 1, Stopped: 2, NotStarted: 4, Attempted: 6, Reverting: 3, Reverted: 2, RevertFailed: 1},
			want:  "rollout r is aborting: reverting 6 touched node(s), 4 not started — watch with: sluice rollout status --watch"},
		{name: "no revert: the nodes in flight finish, the pending never start",
			given: &sluicev1.RolloutCounts{Total: 10, Provisioned: 3, InProgress: 2, Pending: 5, Attempted: 5}, noRevert: true,
			want: "rollout r is stopping: no more nodes start, 2 in flight finish, 5 not started, nothing is reverted — watch with: sluice rollout status --watch"},
		{name: "nothing left to start says none",
			given: &sluicev1.RolloutCounts{Total: 2, Provisioned: 1, InProgress: 1, Attempted: 2}, noRevert: true,
			want: "rollout r is stopping: no more nodes start, 1 in flight finish, nothing is reverted — watch with: sluice rollout status --watch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, AbortedBy: by, Counts: tt.given}
			if got := abortLine("r", r, tt.noRevert); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRolloutStatus_ForwardCountsAddUpToTheTotal: 'rollout status' (its
// block and the one line --watch prints when piped) shows the bar's
// provisioned of the total and every forward category in TallyOf's words,
// adding up to that total.
func TestRolloutStatus_ForwardCountsAddUpToTheTotal(t *testing.T) {
	bar := regexp.MustCompile(`\] (\d+)/(\d+)`)
	for _, r := range tallyRecords() {
		want := contract.TallyOf(r)
		for name, text := range map[string]string{"status": strings.Join(rolloutLines(r, nil, now), "\n"), "watch": progress(r)} {
			m := bar.FindStringSubmatch(text)
			if m == nil || m[1] != strconv.Itoa(int(want.N(contract.CountProvisioned))) || m[2] != strconv.Itoa(int(want.Total)) {
				t.Errorf("%s %s: bar %q, want %d/%d", r.GetId(), name, m, want.N(contract.CountProvisioned), want.Total)
			}
			var sum uint32
			for _, c := range want.Nodes {
				sum += c.N
				if c.N > 0 && !strings.Contains(text, c.Words+" "+strconv.Itoa(int(c.N))) { // a running rollout has no stopped, not started
					t.Errorf("%s %s: no %q in\n%s", r.GetId(), name, c.Words+" "+strconv.Itoa(int(c.N)), text)
				}
			}
			if sum != want.Total {
				t.Errorf("%s: the forward categories add up to %d, not %d", r.GetId(), sum, want.Total)
			}
		}
	}
}
