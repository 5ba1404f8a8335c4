package intent_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
)

func TestCheckApplySize(t *testing.T) {
	tests := []struct {
		name    string
		given   int
		wantErr string // "" = allowed
	}{
		{name: "one", given: 1},
		{name: "the limit", given: intent.MaxIntentsPerApply},
		{name: "one over", given: intent.MaxIntentsPerApply + 1,
			wantErr: "5,001 intents in one apply, over the limit of 5,000: apply them in batches of at most 5,000"},
		{name: "ten thousand", given: 10_000, wantErr: "10,000 intents in one apply, over the limit of 5,000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := intent.CheckApplySize(tt.given)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
				t.Fatalf("CheckApplySize(%d) = %v, want %q", tt.given, err, tt.wantErr)
			}
		})
	}
}
