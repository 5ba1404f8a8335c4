package contract

import (
	"slices"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestValidNodeName(t *testing.T) {
	tests := []struct {
		given   string
		wantErr bool
	}{
		{"node-01", false},
		{"worker-1.eu-west.example.com", false},
		{"", true},
		{"Node-01", true},
		{"a..b", true},
		{"a.", true},
		{"-a.b", true},
		{"a b", true},
		{"a*b", true},
		{"a>b", true},
	}
	for _, tc := range tests {
		t.Run(tc.given, func(t *testing.T) {
			if err := ValidNodeName(tc.given); (err != nil) != tc.wantErr {
				t.Fatalf("ValidNodeName(%q) = %v, wantErr %v", tc.given, err, tc.wantErr)
			}
		})
	}
}

func TestNodeOfConfigKey_NodeNamesWithDots(t *testing.T) {
	node, which, ok := NodeOfConfigKey(DesiredKey("worker-1.example.com"))
	if !ok || node != "worker-1.example.com" || which != "desired" {
		t.Fatalf("got %q %q %v", node, which, ok)
	}
}

func TestServiceVersion_IsSemverAsMicroWantsIt(t *testing.T) {
	tests := []struct{ given, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3", "1.2.3"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3-4-gabcdef0-dirty"},
		{"dev", "0.0.0-dev"},
		{"905dbcc-dirty", "0.0.0-905dbcc-dirty"},
		{"0123", "0.0.0-x0123"},
		{"feature/x y", "0.0.0-feature-x-y"},
		{"", "0.0.0-unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.given, func(t *testing.T) {
			got := ServiceVersion(tc.given)
			if got != tc.want || !semver.MatchString(got) {
				t.Fatalf("ServiceVersion(%q) = %q, want %q (semver)", tc.given, got, tc.want)
			}
		})
	}
}

func TestFeaturesOf_NamesWhatAnAgentMustRead(t *testing.T) {
	tests := []struct {
		name         string
		given        *sluicev1.DesiredConfig
		want         []string
		baselineMiss []string // what an agent of the baseline release (no features) lacks
	}{
		{name: "a plain config needs nothing beyond the baseline", given: &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "f"}},
		{name: "nil", given: nil},
		{name: "bake checks", given: &sluicev1.DesiredConfig{BakeChecks: &sluicev1.BakeChecks{Passes: 2}},
			want: []string{FeatureBakeChecks}, baselineMiss: []string{FeatureBakeChecks}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FeaturesOf(tt.given)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("FeaturesOf = %v, want %v", got, tt.want)
			}
			if m := MissingFeatures(nil, got); !slices.Equal(m, tt.baselineMiss) {
				t.Fatalf("missing for a baseline agent = %v, want %v", m, tt.baselineMiss)
			}
			if m := MissingFeatures(ConfigFeatures, got); m != nil {
				t.Fatalf("this version's agent lacks %v of what this version writes", m)
			}
		})
	}
}
