package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// get pause -o json keeps the requested pause apart from the instances
// that reached it: {"request": {...}, "items": [instances], "unreadable": []}.
func TestGetPauseJSON_RequestApartFromTheInstances(t *testing.T) {
	l := pauseList{req: &sluicev1.PauseRequest{Paused: true, Generation: 3, By: "ana@laptop"},
		insts: []*sluicev1.Instance{{Component: "reaper", Instance: "reaper-1"}}}
	var b strings.Builder
	if err := printListing(&b, l, nil, formatJSON, time.Now()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Request map[string]any   `json:"request"`
		Items   []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b.String())
	}
	if got.Request["generation"] != float64(3) || len(got.Items) != 1 || got.Items[0]["instance"] != "reaper-1" {
		t.Fatalf("get pause -o json:\n%s\nwant the request (generation 3, a number) apart from the one instance", b.String())
	}
}
