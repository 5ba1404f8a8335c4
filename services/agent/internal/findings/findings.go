// Package findings collects a health check's evidence, a line per finding,
// and the failures among them, and gives them back as a check answers:
// the output and the first failure (Report.Result). The agent's FRR and
// network checks (frr, netcheck) each fill one Report per run.
package findings

import (
	"fmt"
	"strings"
)

// Report is a check's evidence, a line per finding, and its failures.
type Report struct {
	lines    []string
	failures []error
}

// Line adds a line of evidence.
func (r *Report) Line(format string, a ...any) { r.lines = append(r.lines, fmt.Sprintf(format, a...)) }

// Fail records err as a failure and as a line of the output.
func (r *Report) Fail(err error) {
	r.lines = append(r.lines, err.Error())
	r.failures = append(r.failures, err)
}

// Add appends o's lines and failures to r's.
func (r *Report) Add(o Report) {
	r.lines = append(r.lines, o.lines...)
	r.failures = append(r.failures, o.failures...)
}

// Result is the check's output and its error: the first failure, saying
// how many more the output holds.
func (r *Report) Result() (string, error) {
	out := strings.Join(r.lines, "\n")
	switch len(r.failures) {
	case 0:
		return out, nil
	case 1:
		return out, r.failures[0]
	}
	return out, fmt.Errorf("%w (and %d more failures, see the output)", r.failures[0], len(r.failures)-1)
}
