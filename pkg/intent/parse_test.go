package intent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const twoDocs = `# tenant networks
kind: Layer2Network
name: tenant-a
spec:
  vlan: 100
  vni: 10100
  mtu: 9000
  anycastGateways: [10.0.100.1/24]
  vrf: tenant-a
  nodeSelector: {matchLabels: {zone: zone-a}}
---
kind: routingtable
name: t100
spec: {table_id: 100}
---
# trailing empty document
`

func TestParse(t *testing.T) {
	tenantA := &sluicev1.Intent{Name: "tenant-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 100, Vni: 10100, Mtu: 9000, AnycastGateways: []string{"10.0.100.1/24"}, Vrf: "tenant-a",
		NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": "zone-a"}},
	}}}
	t100 := &sluicev1.Intent{Name: "t100", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}
	leak := &sluicev1.Intent{Name: "leak", Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{
		Vrf: "tenant-a", Sequence: 10, Import: []*sluicev1.PrefixItem{{Cidr: "10.0.0.0/8", Le: 24}}, Community: "65000:100",
	}}}
	tests := []struct {
		name    string
		given   string
		want    []*sluicev1.Intent
		wantErr []string // each must appear in the error
	}{
		{name: "yaml with several documents", given: twoDocs, want: []*sluicev1.Intent{tenantA, t100}},
		{name: "yaml document that is a list", given: "- {kind: RoutingTable, name: t100, spec: {tableId: 100}}\n- {kind: VRFRoute, name: leak, spec: {vrf: tenant-a, sequence: 10, import: [{cidr: 10.0.0.0/8, le: 24}], community: 65000:100}}\n",
			want: []*sluicev1.Intent{t100, leak}},
		{name: "json object", given: `{"kind": "RoutingTable", "name": "t100", "spec": {"tableId": 100}}`, want: []*sluicev1.Intent{t100}},
		{name: "json array", given: `[{"kind": "RoutingTable", "name": "t100", "spec": {"tableId": 100}},
			{"kind": "VRFRoute", "name": "leak", "spec": {"vrf": "tenant-a", "sequence": 10, "import": [{"cidr": "10.0.0.0/8", "le": 24}], "community": "65000:100"}}]`,
			want: []*sluicev1.Intent{t100, leak}},
		{name: "only comments", given: "# nothing yet\n", want: nil},
		{name: "unknown kind names the valid ones", given: "kind: Bridge\nname: b\nspec: {}\n",
			wantErr: []string{"f.yaml: document 1 (line 1): b: kind: unknown kind \"Bridge\": use one of Layer2Network, RoutingTable, VRFRoute"}},
		{name: "missing kind", given: "name: b\nspec: {}\n", wantErr: []string{"kind: kind is missing"}},
		{name: "unknown top-level field", given: "kind: RoutingTable\nname: t\nspec: {tableId: 1}\nlabels: {a: b}\n",
			wantErr: []string{"routingtable/t: labels: unknown field; an intent has only kind, name, spec"}},
		{name: "unknown spec field names the path and the known fields", given: "kind: Layer2Network\nname: a\nspec: {vlan: 1, vni: 1, vlna: 2}\n",
			wantErr: []string{"layer2network/a: spec.vlna: unknown field; spec has fields vlan, vni, mtu, anycastGateways, vrf, nodeSelector"}},
		{name: "unknown nested field", given: "kind: Layer2Network\nname: a\nspec: {vlan: 1, vni: 1, nodeSelector: {matchLabel: {zone: a}}}\n",
			wantErr: []string{"layer2network/a: spec.nodeSelector.matchLabel: unknown field; spec.nodeSelector has fields matchLabels"}},
		{name: "unknown field in a list item", given: "kind: VRFRoute\nname: r\nspec: {vrf: v, sequence: 1, import: [{cidr: 10.0.0.0/8, lee: 9}]}\n",
			wantErr: []string{"vrfroute/r: spec.import[0].lee: unknown field"}},
		{name: "wrong type names the field's own range", given: "kind: Layer2Network\nname: a\nspec: {vlan: ten, vni: -1, mtu: -1500, anycastGateways: 10.0.0.1/24}\n",
			wantErr: []string{
				`spec.anycastGateways: must be a list, not the string "10.0.0.1/24"`,
				`spec.mtu: must be an MTU from 1000 to 9216 (leave it out for the default 1500), not the number -1500`,
				`spec.vlan: must be a VLAN id from 1 to 4094, not the string "ten"`,
				`spec.vni: must be a VXLAN VNI from 1 to 16777215, not the number -1`,
			}},
		{name: "missing name", given: "kind: RoutingTable\nspec: {tableId: 1}\n", wantErr: []string{"document 1 (line 1): name: name is missing"}},
		{name: "name that YAML reads as a boolean", given: "kind: RoutingTable\nname: no\nspec: {tableId: 1}\n", wantErr: []string{"name: must be a string, not false (quote it)"}},
		{name: "missing spec", given: "kind: RoutingTable\nname: t\n", wantErr: []string{"routingtable/t: spec: spec is missing"}},
		{name: "errors name the document and its line", given: "kind: RoutingTable\nname: ok\nspec: {tableId: 1}\n---\nkind: RoutingTable\nname: bad\nspec: {tableid: 1}\n",
			wantErr: []string{"f.yaml: document 2 (line 7): routingtable/bad: spec.tableid: unknown field"}},
		{name: "every bad document is reported", given: "kind: X\nname: a\nspec: {}\n---\nkind: RoutingTable\nspec: {}\n",
			wantErr: []string{"document 1 (line 1): a: kind: unknown kind", "document 2 (line 5): name: name is missing"}},
		{name: "a list item is named", given: "- {kind: RoutingTable, name: a, spec: {tableId: 1}}\n- {kind: RoutingTable, name: b, spec: {table: 1}}\n",
			wantErr: []string{"document 1 item 2 (line 2): routingtable/b: spec.table: unknown field"}},
		{name: "yaml syntax error gives the file line", given: "kind: RoutingTable\nname: a\nspec: {tableId: 1}\n---\nkind: RoutingTable\nname: [b\n",
			wantErr: []string{"document 2 (line 5): ", "line 6"}},
		{name: "duplicate keys are rejected", given: "kind: RoutingTable\nname: a\nname: b\nspec: {tableId: 1}\n",
			wantErr: []string{`"name" already set`}},
		{name: "a scalar document is not an intent", given: "hello\n", wantErr: []string{"must be an intent object with fields kind, name and spec"}},
		// Found writing FuzzParse's corpus: YAMLToJSON keeps the first and
		// drops the rest, so only the first of these intents was applied.
		{name: "json objects one after another are an error, not only the first",
			given:   `{"kind": "RoutingTable", "name": "a", "spec": {"tableId": 1}}` + "\n" + `{"kind": "RoutingTable", "name": "b", "spec": {"tableId": 2}}` + "\n",
			wantErr: []string{"f.yaml: document 1 (line 1): more than one object or list", "start each next one with a --- line"}},
		{name: "content after a list is an error", given: "[{kind: RoutingTable, name: a, spec: {tableId: 1}}] trailing\n",
			wantErr: []string{"document 1 (line 1): more than one object or list"}},
		{name: "a document on the line of its --- marker is read", given: "--- {kind: RoutingTable, name: t100, spec: {tableId: 100}}\n--- # a comment\n" +
			"kind: RoutingTable\nname: t100\nspec: {tableId: 100}\n", want: []*sluicev1.Intent{t100, t100}},
		{name: "an error in a document on the line of its --- marker names that line",
			given:   "kind: RoutingTable\nname: a\nspec: {tableId: 1}\n--- {kind: RoutingTable, name: b, spec: {tabel: 1}}\n",
			wantErr: []string{"document 2 (line 4): routingtable/b: spec.tabel: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := intent.Parse("f.yaml", []byte(tt.given))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Parse succeeded with %v, want errors %q", got, tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not contain %q:\n%v", w, err)
					}
				}
				var pe *intent.ParseError
				if !errors.As(err, &pe) {
					t.Errorf("error is not a *ParseError: %T", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d intents, want %d: %v", len(got), len(tt.want), got)
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("intent %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseFiles_DirectoryReadsIntentFilesInNameOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yml", "kind: RoutingTable\nname: from-b\nspec: {tableId: 2}\n")
	write("a.yaml", "kind: RoutingTable\nname: from-a\nspec: {tableId: 1}\n")
	write("c.json", `{"kind": "RoutingTable", "name": "from-c", "spec": {"tableId": 3}}`)
	write("README.md", "not an intent")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("sub/d.yaml", "kind: RoutingTable\nname: from-sub\nspec: {tableId: 4}\n")

	got, err := intent.ParseFiles(dir)
	if err != nil {
		t.Fatalf("ParseFiles: %v", err)
	}
	var names []string
	for _, in := range got {
		names = append(names, in.GetName())
	}
	if strings.Join(names, ",") != "from-a,from-b,from-c" {
		t.Errorf("got intents %v, want from-a,from-b,from-c (sub/ is not read)", names)
	}
}

func TestParseFiles_ReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	bad1 := filepath.Join(dir, "one.yaml")
	bad2 := filepath.Join(dir, "two.yaml")
	_ = os.WriteFile(bad1, []byte("kind: Nope\nname: a\nspec: {}\n"), 0o644)
	_ = os.WriteFile(bad2, []byte("kind: RoutingTable\nspec: {tableId: 1}\n"), 0o644)
	_, err := intent.ParseFiles(bad1, bad2, filepath.Join(dir, "missing.yaml"))
	if err == nil {
		t.Fatal("ParseFiles succeeded, want errors")
	}
	for _, w := range []string{bad1 + ": document 1 (line 1): a: kind: unknown kind", bad2 + ": document 1 (line 1): name: name is missing", "missing.yaml"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}

func TestParseFiles_EmptyDirectoryIsAnError(t *testing.T) {
	dir := t.TempDir()
	if _, err := intent.ParseFiles(dir); err == nil || !strings.Contains(err.Error(), "has no .yaml, .yml or .json files") {
		t.Fatalf("ParseFiles(empty dir) error = %v", err)
	}
}

// A file over intent.MaxFileSize is refused, naming it and the limit,
// without being read whole: a 20 MB file by its size, and an endless one
// (a device) once the limit is passed.
func TestParseFiles_FileOverTheLimit_IsRefusedBeforeReadingItWhole(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("kind: RoutingTable\nname: t\nspec: {tableId: 1}\n#"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 20_000_000); err != nil { // sparse: no 20 MB written
		t.Fatal(err)
	}
	atLimit := filepath.Join(t.TempDir(), "at-limit.yaml")
	doc := "kind: RoutingTable\nname: t\nspec: {tableId: 1}\n#"
	if err := os.WriteFile(atLimit, []byte(doc+strings.Repeat(" ", intent.MaxFileSize-len(doc)-1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, given string
		wantErr     string // "" = parses
	}{
		{name: "a 20 MB file", given: big,
			wantErr: big + " is 20,000,000 bytes, over the limit of 16,777,216 bytes (16 MiB) for one intent file; nothing was read: split it into several files"},
		{name: "an endless device", given: "/dev/zero", wantErr: "/dev/zero is more than 16,777,216 bytes, over the limit"},
		{name: "a file of exactly the limit", given: atLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := intent.ParseFiles(tt.given)
			if tt.wantErr == "" {
				if err != nil || len(got) != 1 {
					t.Fatalf("ParseFiles = %d intents, %v; want 1", len(got), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseFiles error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// Issue 38, item 6: a parse error names the intent as the file wrote it;
// a control character in that name is escaped, not sent to the terminal.
func TestParseError_EscapesControlCharactersOfTheFile(t *testing.T) {
	_, err := intent.Parse("evil.yaml", []byte("kind: Layer9\nname: \"x\\e]0;pwned\\a\"\nspec: {}\n"))
	if err == nil {
		t.Fatal("no error for an unknown kind")
	}
	want := `evil.yaml: document 1 (line 1): x\x1b]0;pwned\a: kind: unknown kind "Layer9"`
	if got := err.Error(); !strings.HasPrefix(got, want) || !contract.Printable(got) {
		t.Fatalf("error %q, want it to start %q and be printable", got, want)
	}
}
