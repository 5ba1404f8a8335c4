package contract

import "testing"

func TestSnake(t *testing.T) {
	for _, tt := range []struct{ given, want string }{
		{"", ""},
		{"total", "total"},
		{CountInProgress, "in_progress"},
		{CountRevertFailed, "revert_failed"},
		{"RolloutPhase", "rollout_phase"},
		{"NodePhase", "node_phase"},
		{"A", "a"},
		{"aB", "a_b"},
	} {
		if got := Snake(tt.given); got != tt.want {
			t.Errorf("Snake(%q) = %q, want %q", tt.given, got, tt.want)
		}
	}
}
