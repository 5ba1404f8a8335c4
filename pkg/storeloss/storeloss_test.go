package storeloss_test

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestJudge(t *testing.T) {
	const a, b = "aaaaaaaaaaaa1111", "bbbbbbbbbbbb2222"
	three := []storeloss.Node{{Node: "n1", Revision: a, Fingerprint: "f1"}, {Node: "n2", Revision: a, Fingerprint: "f2"}, {Node: "n3", Revision: b, Fingerprint: "f3"}}
	tests := []struct {
		name  string
		given storeloss.Evidence
		want  string // Loss.String(); "" = not lost
	}{
		{name: "first install: no node runs anything", given: storeloss.Evidence{}, want: ""},
		{name: "wiped store, nodes run two revisions", given: storeloss.Evidence{Nodes: three},
			want: "the store is empty but 3 nodes run configs of revisions aaaaaaaaaaaa (2), bbbbbbbbbbbb (1)"},
		{name: "one node, one revision", given: storeloss.Evidence{Nodes: three[:1]},
			want: "the store is empty but 1 node runs configs of revision aaaaaaaaaaaa"},
		{name: "the store records a rollout", given: storeloss.Evidence{Rollouts: true, Nodes: three}, want: ""},
		{name: "an operator confirmed", given: storeloss.Evidence{Confirmed: &sluicev1.StoreConfirm{By: "ops"}, Nodes: three}, want: ""},
		{name: "first rollout under way: nodes run a revision the store holds",
			given: storeloss.Evidence{Nodes: three, Held: map[string]bool{a: true, b: true}}, want: ""},
		{name: "a revision cut after the loss does not hide the nodes running another",
			given: storeloss.Evidence{Nodes: three, Held: map[string]bool{b: true}},
			want:  "the store is empty but 2 nodes run configs of revision aaaaaaaaaaaa"},
		{name: "a node on an empty config (no revision) is no evidence",
			given: storeloss.Evidence{Nodes: []storeloss.Node{{Node: "n1", Fingerprint: "empty"}}}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storeloss.Judge(tt.given)
			if s := got.String(); s != tt.want {
				t.Fatalf("Judge = %q, want %q", s, tt.want)
			}
			if (got == nil) != (tt.want == "") {
				t.Fatalf("Judge = %v, want lost %v", got, tt.want != "")
			}
		})
	}
}
