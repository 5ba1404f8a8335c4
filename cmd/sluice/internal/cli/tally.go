package cli

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
)

// The counts in tables ('get rollouts', 'rollout history'): each cell is a
// category of contract.TallyOf looked up by its key and headed by its words,
// the words 'rollout status', the dashboard and sluice_rollout_nodes use, so
// that a row's forward cells add up to its total.

// otherColumn heads the cell of the forward categories a table has no
// column for (otherCell).
const otherColumn = "OTHER"

// countColumn is the header of key's column: its words upper-cased and
// dashed ("in progress": IN-PROGRESS).
func countColumn(key string) string {
	return strings.ToUpper(strings.ReplaceAll(contract.Words(key), " ", "-"))
}

// countCell is how many t counts in key.
func countCell(t contract.Tally, key string) string { return fmt.Sprint(t.N(key)) }

// provisionedCell is "provisioned/total".
func provisionedCell(t contract.Tally) string {
	return fmt.Sprintf("%d/%d", t.N(contract.CountProvisioned), t.Total)
}

// otherCell lists the forward categories of t that count a node and are
// not shown (the table's columns), as 'rollout status' words them
// ("pending 3, in progress 2"), then what does not add up; "-" when
// nothing is left.
func otherCell(t contract.Tally, shown ...string) string {
	var parts []string
	for _, c := range t.Rest(shown...) {
		parts = append(parts, fmt.Sprintf("%s %d", c.Words, c.N))
	}
	if t.Off != "" {
		parts = append(parts, t.Off)
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ", ")
}
