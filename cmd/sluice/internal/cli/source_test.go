package cli

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// rollout status (and describe rollout) says where the rollout came from,
// under its revision; a rollout the API started says nothing of it.
func TestRolloutLines_NameTheGitCommit(t *testing.T) {
	r := rolledBack()
	r.Source = gitSource
	lines := rolloutLines(r, nil, now)
	if got, want := lines[2], "source    from git registry gitops commit 0123456789ab (Ada Admin: add red)"; got != want {
		t.Errorf("line 3 = %q, want %q", got, want)
	}
	if text := strings.Join(rolloutLines(rolledBack(), nil, now), "\n"); strings.Contains(text, "source ") {
		t.Errorf("a rollout without a source names one:\n%s", text)
	}
}

// -o json prints the record's source in protojson (camelCase).
func TestHistory_JSONCarriesTheSource(t *testing.T) {
	h := tableFixtures()["history"]
	var out bytes.Buffer
	if err := printListing(&out, h, nil, formatJSON, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"source"`, `"registry": "gitops"`, `"hash": "0123456789abcdef0123456789abcdef01234567"`, `"subject": "add red"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %s in:\n%s", want, out.String())
		}
	}
}

// A revision shows the source of the head move that introduced it: its
// oldest rollout record kept, else the head when the head names it.
func TestRevisionSources(t *testing.T) {
	api := (*sluicev1.Source)(nil)
	later := &sluicev1.Source{Registry: "gitops", Commit: &sluicev1.GitCommit{Hash: "fedcba9876543210", Subject: "revert"}}
	redis := &sluicev1.Source{Registry: "redis1"}
	tests := []struct {
		name     string
		rollouts []*sluicev1.Rollout
		head     *sluicev1.Head
		want     map[string]*sluicev1.Source
	}{
		{"no records, no head", nil, nil, map[string]*sluicev1.Source{}},
		{"the head's revision before its rollout started", nil, &sluicev1.Head{Revision: revA, Source: gitSource},
			map[string]*sluicev1.Source{revA: gitSource}},
		{"the oldest record of the revision, not a later rollout of the same content",
			[]*sluicev1.Rollout{{Revision: revA, Generation: 5, Source: later}, {Revision: revA, Generation: 2, Source: gitSource}, {Revision: revB, Generation: 3, Source: redis}},
			&sluicev1.Head{Revision: revA, Generation: 5, Source: later},
			map[string]*sluicev1.Source{revA: gitSource, revB: redis}},
		{"a revision the API brought first has none",
			[]*sluicev1.Rollout{{Revision: revA, Generation: 1, Source: api}, {Revision: revA, Generation: 4, Source: gitSource}}, nil,
			map[string]*sluicev1.Source{revA: nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := revisionSources(tc.rollouts, tc.head)
			if len(got) != len(tc.want) {
				t.Fatalf("sources = %v, want %v", got, tc.want)
			}
			for id, w := range tc.want {
				if g, ok := got[id]; !ok || !proto.Equal(g, w) {
					t.Errorf("source of %s = %v, want %v", short(id), g, w)
				}
			}
		})
	}
}
