package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// get intents says below its table why each deleting intent is still
// there, as the reaper decided it (its status endpoint), and when it looks
// again; an intent the reaper has not looked at yet, or no reaper, is said
// to be so.
func TestDeletingLines_SayWhyTheReaperKeepsEach(t *testing.T) {
	tbl := func(name string, marked bool) *sluicev1.StoredIntent {
		return &sluicev1.StoredIntent{MarkedForDeletion: marked, Intent: &sluicev1.Intent{Name: name,
			Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 1}}}}
	}
	backup := "revision 3f2a9c1b2d4e contains it, and node n1's backup config came from it (and 4 more node configs): a revert may put that config back"
	st := &contract.ReaperStatus{NextPass: now.Add(20 * time.Second), KeptAt: now.Add(-10 * time.Second),
		Kept: []contract.KeptIntents{{Reason: backup, Intents: []string{"routingtable.a", "routingtable.b", "routingtable.c", "routingtable.d"}}}}
	head := "intent(s) deleting, kept by the reaper as of its look at " + now.Add(-10*time.Second).Local().Format(time.TimeOnly) +
		" (10s ago); it looks again at its next pass, by " + now.Add(20*time.Second).Local().Format(time.TimeOnly) + " (in 20s):"
	tests := []struct {
		name  string
		given intentList
		st    *contract.ReaperStatus
		asked error
		want  []string
	}{
		{name: "none deleting: nothing to say", given: intentList{tbl("a", false)}, st: st},
		{
			name:  "kept while a backup references them: the reaper's reason, by reason, a few named",
			given: intentList{tbl("a", true), tbl("b", true), tbl("c", true), tbl("d", true), tbl("live", false)},
			st:    st,
			want:  []string{"4 " + head, "  routingtable/a, routingtable/b, routingtable/c and 1 more: " + backup},
		},
		{
			name:  "marked since the reaper's last look",
			given: intentList{tbl("a", true), tbl("new", true)},
			st:    st,
			want: []string{"2 " + head, "  routingtable/a: " + backup,
				"  routingtable/new: not looked at yet by the reaper: marked since its last look"},
		},
		{
			name:  "no reaper answered",
			given: intentList{tbl("a", true)},
			asked: errors.New("nats: no responders available for request"),
			want: []string{"1 intent(s) deleting; the reaper, which deletes them once nothing references them, did not answer " +
				"(nats: no responders available for request): none is deleted while no reaper runs"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := deletingLines(tc.given, tc.st, tc.asked, now); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// Through sluice dev: an intent deleted while the nodes' backups still
// come from the revision holding it stays deleting, and get intents says
// so in the reaper's words (its status endpoint, over NATS).
func TestGetIntents_DeletingIntentKeptForABackup_SaysWhyInTheReapersWords(t *testing.T) {
	s := startSystem(t, 2)
	f := writeFile(t, "tenant-a.yaml", tenantA)
	for _, args := range [][]string{{"apply", "-f", f}, {"rollout", "status", "--watch"}, {"delete", "routingtable", "mgmt"}, {"rollout", "status", "--watch"}} {
		if code, stdout, stderr := sluice(t, s.URL(), args...); code != 0 {
			t.Fatalf("%v: exit %d: %s%s", args, code, stdout, stderr)
		}
	}
	// margin: the reaper looks every 30s (its default interval in sluice
	// dev); the poll ends at its first look after the delete.
	var out string
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		_, out, _ = sluice(t, s.URL(), "get", "intents")
		if strings.Contains(out, "routingtable/mgmt: revision ") {
			break
		}
	}
	reasons := []string{"1 intent(s) deleting, kept by the reaper as of its look at ", "it looks again at its next pass, by ",
		"routingtable/mgmt: revision ", "backup config came from it (and 1 more node configs): a revert may put that config back"}
	for _, want := range reasons {
		if !strings.Contains(out, want) {
			t.Errorf("get intents: missing %q in\n%s", want, out)
		}
	}
	// describe intent says the same of the one intent.
	code, out, stderr := sluice(t, s.URL(), "describe", "intent", "routingtable/mgmt")
	spaced := strings.Join(strings.Fields(out), " ") // the labels' column is as wide as the longest
	for _, want := range append([]string{"Intent: routingtable/mgmt", "Status: deleting", "Source: api"}, reasons[1:]...) {
		if code != 0 || !strings.Contains(spaced, want) {
			t.Errorf("describe intent: exit %d, missing %q in\n%s%s", code, want, out, stderr)
		}
	}
}

func TestDescribeIntent_BadArgument_NamesIt(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"mgmt"}, `intent "mgmt": give KIND/NAME or KIND NAME`},
		{[]string{"routingtable/"}, `intent "routingtable/": give KIND/NAME or KIND NAME`},
		{[]string{"table/mgmt"}, `intent kind "table": `},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := intentArg(tc.args)
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("intentArg(%q) = %v, want an error starting %q", tc.args, err, tc.wantErr)
			}
		})
	}
	for _, args := range [][]string{{"routingtable/mgmt"}, {"RoutingTable", "mgmt"}} {
		if kind, name, err := intentArg(args); err != nil || kind != "RoutingTable" || name != "mgmt" {
			t.Errorf("intentArg(%q) = %q, %q, %v; want RoutingTable, mgmt", args, kind, name, err)
		}
	}
}
