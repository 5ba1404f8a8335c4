// Package alerts checks what deploy/ ships for the monitoring operators
// already run: the Prometheus alert rules (deploy/prometheus/alerts.yaml,
// with promtool, Debian's prometheus package, which `make test` installs)
// and the Grafana dashboard (deploy/grafana/sluice-dashboard.json). Every
// query must parse, every alert must fire and stay quiet in its unit tests,
// and every sluice metric they name must be one the services register and
// docs/operations.md documents.
package alerts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	agent "github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

const (
	rulesDir  = "../../deploy/prometheus"
	rules     = rulesDir + "/alerts.yaml"
	dashboard = "../../deploy/grafana/sluice-dashboard.json"
	opsDoc    = "../../docs/operations.md"
)

// promtool runs Debian's promtool in dir; it fails the test, never skips,
// when promtool is missing (make test installs it).
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found: install Debian's prometheus package (make promtool, which make test runs): %v", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestAlertRules_Check(t *testing.T) {
	promtool(t, rulesDir, "check", "rules", "alerts.yaml")
}

// The unit tests in alerts_test.yaml: each alert fires in one case and
// stays quiet in another.
func TestAlertRules_UnitTests(t *testing.T) {
	promtool(t, rulesDir, "test", "rules", "alerts_test.yaml")
}

// Every alert has a unit test that expects it to fire.
func TestAlertRules_EveryAlertTested(t *testing.T) {
	alerts := matches(t, rules, regexp.MustCompile(`(?m)^\s*- alert: (\S+)`))
	tested := matches(t, filepath.Join(rulesDir, "alerts_test.yaml"), regexp.MustCompile(`(?m)^\s*alertname: (\S+)`))
	if len(alerts) < 10 {
		t.Fatalf("found %d alerts in %s, want the ten or more it holds: is the pattern still right?", len(alerts), rules)
	}
	for _, a := range alerts {
		if !slices.Contains(tested, a) {
			t.Errorf("alert %s has no case in alerts_test.yaml", a)
		}
	}
}

type grafanaDashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ X, Y, W, H int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboard, err)
	}
	return d
}

// The dashboard is well formed for Grafana's import: a title and uid, a
// Prometheus datasource variable every panel uses, unique panel ids,
// panels inside the 24-column grid, and every query valid PromQL (promtool
// checks each as a recording rule's expression).
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: want both", d.Title, d.UID)
	}
	if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("templating %+v: want a Prometheus datasource variable first", d.Templating.List)
	}
	ids := map[int]bool{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q target %s: empty query", p.Title, q.RefID)
				continue
			}
			queries++
			expr, _ := json.Marshal(q.Expr) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "      - record: dashboard:panel_%d_%s\n        expr: %s\n", p.ID, q.RefID, expr)
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries in the dashboard, want the ten or more it holds", queries)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-queries.yaml"), []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "dashboard-queries.yaml")
}

// metricName matches a sluice metric in a query; a histogram's series
// (_bucket, _count, _sum) name the histogram.
var metricName = regexp.MustCompile(`\bsluice_[a-z0-9_]+\b`)

func histogramBase(name string) string {
	for _, s := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, s); ok && strings.HasSuffix(base, "_seconds") {
			return base
		}
	}
	return name
}

// documented is every metric docs/operations.md's metrics table lists.
func documented(t *testing.T) []string {
	t.Helper()
	names := matches(t, opsDoc, regexp.MustCompile("(?m)^\\| `(sluice_[a-z0-9_]+)` \\|"))
	if len(names) < 10 {
		t.Fatalf("found %d metrics in %s's table, want the ten or more it lists: is the pattern still right?", len(names), opsDoc)
	}
	return names
}

// recorder is a Registerer that keeps what it is given, to read the
// names of metrics whose vectors hold no series yet.
type recorder struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// Every sluice metric an alert or a panel queries is documented, and every
// metric a service registers is documented (the docs table is the
// contract the rules are written against).
func TestMetricNames(t *testing.T) {
	docs := documented(t)
	var rec recorder
	coordinator.NewMetrics(&rec)
	agent.NewMetrics(&rec)
	configurator.NewMetrics(&rec)
	reaper.NewMetrics(&rec)
	if len(rec.names) < 10 {
		t.Fatalf("the services registered %d metrics, want the ten or more they have", len(rec.names))
	}
	for _, n := range rec.names {
		if !slices.Contains(docs, n) {
			t.Errorf("metric %s is registered but not in %s's metrics table", n, opsDoc)
		}
	}
	used := map[string][]string{}
	for _, n := range matches(t, rules, metricName) {
		used[histogramBase(n)] = append(used[histogramBase(n)], rules)
	}
	for _, p := range readDashboard(t).Panels {
		for _, q := range p.Targets {
			for _, n := range metricName.FindAllString(q.Expr, -1) {
				used[histogramBase(n)] = append(used[histogramBase(n)], dashboard+" panel "+p.Title)
			}
		}
	}
	for n, where := range used {
		if !slices.Contains(docs, n) {
			t.Errorf("%s queries %s, which is not in %s's metrics table (a typo, or a metric that was renamed)", where[0], n, opsDoc)
		}
	}
}

// matches returns the first group of every match of re in file (or the
// whole match when re has no group), in order, without repeats.
func matches(t *testing.T, file string, re *regexp.Regexp) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		v := m[len(m)-1]
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// docker-compose's profile "prometheus" (deploy/prometheus/compose.yml):
// promtool accepts the config with the alert rules it loads, and it scrapes
// every compose service that serves /metrics (--http-addr :9090).
func TestComposePrometheus_ChecksAndScrapesEveryService(t *testing.T) {
	const config = rulesDir + "/compose.yml"
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	// In the container the rules are at /etc/prometheus/alerts.yaml.
	tmp := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(tmp, bytes.ReplaceAll(b, []byte("/etc/prometheus/alerts.yaml"), []byte(abs)), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, ".", "check", "config", tmp)

	compose, err := os.ReadFile("../../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	current := ""
	for _, line := range strings.Split(string(compose), "\n") {
		if m := regexp.MustCompile(`^  ([a-z0-9-]+):$`).FindStringSubmatch(line); m != nil {
			current = m[1]
		}
		if strings.Contains(line, `"--http-addr", ":9090"`) && current != "" {
			services = append(services, current)
		}
	}
	if len(services) < 10 {
		t.Fatalf("found %d compose services serving :9090, want every sluice service (10): is the pattern still right? %v", len(services), services)
	}
	for _, s := range services {
		if !strings.Contains(string(b), `"`+s+`:9090"`) {
			t.Errorf("%s does not scrape compose service %s (%s:9090)", config, s, s)
		}
	}
	if !strings.Contains(string(compose), "./deploy/prometheus/alerts.yaml:/etc/prometheus/alerts.yaml") {
		t.Errorf("docker-compose.yaml's prometheus does not mount deploy/prometheus/alerts.yaml where compose.yml loads it")
	}
}
