package configurator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/pkg/store"
)

// What repairHead does with its read of the head. A direct get may be
// answered by a replica still behind the unreadable head the watch
// delivered: that answer is no answer (chaos seed 75).
func TestPlanHeadRepair(t *testing.T) {
	undecodable := fmt.Errorf("get revisions/head: %w", store.ErrUndecodable)
	notFound := fmt.Errorf("get revisions/head: %w", store.ErrNotFound)
	timeout := errors.New("context deadline exceeded")
	for _, tc := range []struct {
		name         string
		readRev      uint64
		err          error
		unreadableAt uint64
		wroteOne     bool
		want         headRepair
	}{
		{"readable, no unreadable seen", 7, nil, 0, true, headFine},
		{"readable at the unreadable revision's successor", 9, nil, 8, true, headFine},
		{"readable at the unreadable revision itself (a replica's late view of a rewrite)", 8, nil, 8, false, headFine},
		{"readable below the unreadable revision: a replica behind", 7, nil, 8, true, headBehind},
		{"readable below, this process wrote none", 7, nil, 8, false, headBehind},
		{"gone", 0, notFound, 8, true, headFine},
		{"read failed", 0, timeout, 8, true, headUnknown},
		{"read failed, nothing seen", 0, timeout, 0, false, headUnknown},
		{"undecodable, this process wrote one", 8, undecodable, 8, true, headRewrite},
		{"undecodable, this process wrote none", 8, undecodable, 8, false, headReconcile},
		{"undecodable from heal (nothing seen by the watch)", 8, undecodable, 0, true, headRewrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planHeadRepair(tc.readRev, tc.err, tc.unreadableAt, tc.wroteOne); got != tc.want {
				t.Errorf("planHeadRepair(%d, %v, %d, %v) = %d, want %d", tc.readRev, tc.err, tc.unreadableAt, tc.wroteOne, got, tc.want)
			}
		})
	}
}
