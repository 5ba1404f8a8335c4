package contract

import (
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestSourceLine(t *testing.T) {
	commit := &sluicev1.GitCommit{Hash: "0123456789abcdef0123456789abcdef01234567", Subject: "add tenant a",
		Author: "Ada Admin <ada@example.net>", Committer: "CI <ci@example.net>"}
	for _, tc := range []struct {
		name  string
		given *sluicev1.Source
		want  string
	}{
		{"unset: the API", nil, ""},
		{"no registry", &sluicev1.Source{}, ""},
		{"a registry that is not git", &sluicev1.Source{Registry: "redis1"}, "registry redis1"},
		{"a git registry", &sluicev1.Source{Registry: "gitops", Commit: commit},
			"git registry gitops commit 0123456789ab (Ada Admin: add tenant a)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SourceLine(tc.given); got != tc.want {
				t.Errorf("SourceLine = %q, want %q", got, tc.want)
			}
		})
	}
}
