package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/registryspec"
	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// mostInvalid is how many invalid intents of one registry the footer lists.
const mostInvalid = 10

// registryRow is one source of intents: the built-in one (no spec) or a
// registry, with the status the configurator last wrote for it (nil when
// it has written none yet) and the intents it owns now.
type registryRow struct {
	name    string
	spec    *sluicev1.RegistrySpec
	status  *sluicev1.RegistryStatus
	intents int // live intents whose source it is
	marked  int // its intents marked for deletion, not yet reaped
}

// kind is "redis", "directory", "git", "kubernetes" or, for the built-in source, "api".
func (r registryRow) kind() string {
	if r.spec == nil {
		return "api"
	}
	return registryspec.Kind(r.spec)
}

// strayCount is a source named by live intents that is neither the
// built-in one nor a registry: a removed registry, or what an older sluice
// recorded.
type strayCount struct {
	source  string
	intents int
}

// registryList is `sluice get registries`: the built-in source first, then
// every registry with a spec, by name.
type registryList struct {
	rows   []registryRow
	strays []strayCount
}

// builtin reports whether source is the built-in registry's: sluice apply,
// sluice undo, or an intent stored before sources were recorded.
func builtin(source string) bool {
	return source == contract.SourceAPI || source == contract.SourceUndo || source == ""
}

func loadRegistries(ctx context.Context, js jetstream.KeyValueManager) (listing, []unreadableKey, error) {
	controlKV, err := bucket(ctx, js, contract.BucketControl)
	if err != nil {
		return nil, nil, err
	}
	entries, err := store.New(controlKV, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} }).List(ctx, contract.RegistryKeyPrefix+"*")
	if err != nil {
		return nil, nil, err
	}
	var bad []unreadableKey
	specs := map[string]*sluicev1.RegistrySpec{}
	for _, e := range entries {
		name, isSpec, ok := contract.RegistryOfKey(e.Key)
		switch {
		case !ok || !isSpec:
		case e.Err != nil:
			bad = append(bad, newUnreadable(contract.BucketControl, e.Key, e.Err))
		default:
			specs[name] = e.Value
		}
	}
	statuses, badS, err := list(ctx, js, contract.BucketRegistries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} })
	if err != nil {
		return nil, nil, err
	}
	for _, u := range badS {
		if _, ok := specs[u.Key]; ok || u.Key == contract.SourceAPI { // a removed registry's status is not shown
			bad = append(bad, u)
		}
	}
	intents, badI, err := list(ctx, js, contract.BucketIntents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	if err != nil {
		return nil, nil, err
	}
	return newRegistryList(specs, statuses, intents), append(bad, badI...), nil
}

// newRegistryList joins the specs (by name), the statuses the configurator
// wrote and the stored intents. Statuses without a spec are left out.
func newRegistryList(specs map[string]*sluicev1.RegistrySpec, statuses []*sluicev1.RegistryStatus, intents []*sluicev1.StoredIntent) registryList {
	byName := map[string]*sluicev1.RegistryStatus{}
	for _, st := range statuses {
		byName[st.GetName()] = st
	}
	live, marked := map[string]int{}, map[string]int{}
	for _, si := range intents {
		src := si.GetSource()
		if builtin(src) {
			src = contract.SourceAPI
		}
		if si.GetMarkedForDeletion() {
			marked[src]++
		} else {
			live[src]++
		}
	}
	l := registryList{rows: []registryRow{{name: contract.SourceAPI, status: byName[contract.SourceAPI],
		intents: live[contract.SourceAPI], marked: marked[contract.SourceAPI]}}}
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		l.rows = append(l.rows, registryRow{name: name, spec: specs[name], status: byName[name], intents: live[name], marked: marked[name]})
	}
	for _, src := range slices.Sorted(maps.Keys(live)) {
		if _, ok := specs[src]; !ok && src != contract.SourceAPI {
			l.strays = append(l.strays, strayCount{source: src, intents: live[src]})
		}
	}
	return l
}

func (l registryList) table(now time.Time) [][]string {
	rows := [][]string{{"NAME", "KIND", "LOCATION", "STATE", "LAST-SYNC", "INTENTS", "MARKED"}}
	for _, r := range l.rows {
		location, state := "sluice apply", none
		if r.spec != nil {
			location, state = registryspec.Location(r.spec), "no status yet"
		}
		if r.status != nil {
			state = enumWord(r.status.GetState())
		}
		rows = append(rows, []string{r.name, r.kind(), location, state, age(now, r.status.GetLastSync()),
			fmt.Sprint(r.intents), fmt.Sprint(r.marked)})
	}
	return rows
}

// footer says, registry by registry, what needs an operator: unreachable
// or unusable registries, held and pending deletions, invalid intents,
// conflicts (on both sides) and notes; then sources that are not a registry.
func (l registryList) footer(now time.Time) []string {
	// A registry's own lines, then the conflicts it wins, which the other
	// registry's status records.
	lines, won := map[string][]string{}, map[string][]string{}
	add := func(name, format string, args ...any) {
		lines[name] = append(lines[name], fmt.Sprintf(format, args...))
	}
	owners := map[string]string{} // a conflict's owner → the row it is shown under
	for _, r := range l.rows {
		owners[r.name] = r.name
	}
	owners[contract.SourceUndo] = contract.SourceAPI
	for _, r := range l.rows {
		st, name := r.status, r.name
		switch st.GetState() {
		case sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE:
			add(name, "%s unreachable%s, %d failed fetch(es) in a row: %s", name, since(now, st.GetUnreachableSince()), st.GetAttempts(), orNone(st.GetError()))
		case sluicev1.RegistryState_REGISTRY_STATE_INVALID:
			add(name, "%s cannot be synced: %s", name, orNone(st.GetError()))
		case sluicev1.RegistryState_REGISTRY_STATE_HELD:
			if e := st.GetError(); e != "" { // an answer held, not a deletion
				add(name, "%s answer %s", name, e)
			}
		}
		if c := st.GetCommit(); c != nil {
			add(name, "%s: commit in force %.12s %q by %s, %s", name, c.GetHash(), c.GetSubject(), c.GetAuthor(),
				c.GetTime().AsTime().Local().Format(time.DateTime))
		}
		if h := st.GetHeld(); len(h.GetIntents()) > 0 {
			line := fmt.Sprintf("%s holds a deletion of %d intent(s) (digest %s)%s: %s", name, len(h.GetIntents()),
				shortN(h.GetDigest(), 12), since(now, h.GetSince()), strings.TrimRight(orNone(h.GetReason()), ". "))
			if confirm := "sluice registry confirm " + name; !strings.Contains(line, confirm) { // the reason may say it already
				line += " — confirm with: " + confirm
			}
			add(name, "%s", line)
		}
		if p := st.GetPending(); len(p) > 0 {
			add(name, "%s", pendingLine(now, name, p))
		}
		for i, fe := range st.GetInvalid() {
			if i == mostInvalid {
				add(name, "%s: (+%d more invalid intents)", name, len(st.GetInvalid())-mostInvalid)
				break
			}
			add(name, "%s: %s", name, intent.FormatFieldError(fe))
		}
		for _, c := range st.GetConflicts() {
			add(name, "%s: %s is also declared by %s, which owns it; %s's version is ignored", name, c.GetIntent(), c.GetOwner(), name)
			if owner, ok := owners[c.GetOwner()]; ok {
				won[owner] = append(won[owner], fmt.Sprintf("%s: %s is also declared by %s (conflict)", owner, c.GetIntent(), name))
			}
		}
		if n := st.GetNote(); n != "" {
			add(name, "%s: %s", name, n)
		}
	}
	var out []string
	for _, r := range l.rows {
		out = append(append(out, lines[r.name]...), won[r.name]...)
	}
	for _, s := range l.strays {
		out = append(out, fmt.Sprintf("%d intent(s) have source %s, which is not a registry (removed?): they stay in force; 'sluice apply' takes one over, 'sluice delete' removes it",
			s.intents, s.source))
	}
	return out
}

// pendingLine says which intents a registry no longer declares and when
// each is marked for deletion unless an answer declares it again.
func pendingLine(now time.Time, name string, pending []*sluicev1.PendingDeletion) string {
	var when []string
	for i, p := range pending {
		if i == mostInvalid {
			when = append(when, fmt.Sprintf("and %d more", len(pending)-mostInvalid))
			break
		}
		at := p.GetEffectiveAt()
		w := fmt.Sprintf("%s at %s", p.GetIntent(), at.AsTime().Local().Format(time.DateTime))
		if d := at.AsTime().Sub(now); d > 0 {
			w += " (in " + humanDuration(d) + ")"
		} else {
			w += " (due: at the registry's next sync)"
		}
		when = append(when, w)
	}
	return fmt.Sprintf("%s: %d intent(s) pending deletion, no longer declared: %s; each is marked then unless an answer declares it again — to mark them at once: sluice registry confirm %s",
		name, len(pending), strings.Join(when, ", "), name)
}

// since says when something about a registry began: " since 2026-03-01
// 11:57:00 (3m ago)"; "" when unknown.
func since(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf(" since %s (%s ago)", t.AsTime().Local().Format(time.DateTime), age(now, t))
}

// registryObject is a registry in json and yaml output.
type registryObject struct {
	Name    string          `json:"name"`
	Kind    string          `json:"kind"`
	Intents int             `json:"intents"`
	Marked  int             `json:"marked"`
	Spec    json.RawMessage `json:"spec,omitempty"`
	Status  json.RawMessage `json:"status,omitempty"`
}

func (l registryList) objects() ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(l.rows))
	for _, r := range l.rows {
		o := registryObject{Name: r.name, Kind: r.kind(), Intents: r.intents, Marked: r.marked}
		var err error
		if r.spec != nil {
			if o.Spec, err = view.JSON(r.spec); err != nil {
				return nil, fmt.Errorf("encode registry %s: %w", r.name, err)
			}
		}
		if r.status != nil {
			if o.Status, err = view.JSON(r.status); err != nil {
				return nil, fmt.Errorf("encode registry %s: %w", r.name, err)
			}
		}
		b, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encode registry %s: %w", r.name, err)
		}
		out = append(out, b)
	}
	return out, nil
}
