package coordinator

import (
	"fmt"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// maxParallel resolves the strategy's maxParallel ("5", "10%", or "" = 1)
// against the number of nodes in the rollout. A percentage rounds up and is
// never less than one node.
func maxParallel(st *sluicev1.Strategy, total int) (int, error) {
	s := strings.TrimSpace(st.GetMaxParallel())
	if s == "" {
		return 1, nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("strategy.maxParallel %q: a percentage must be 1%%-100%%", s)
		}
		return max(1, (total*n+99)/100), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("strategy.maxParallel %q: must be a positive count or a percentage like 10%%", s)
	}
	return n, nil
}
