package promtest_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/promtest"
)

// Prometheus scrapes the exporter; a value the test sets shows in a query.
func TestStart_ScrapesTheExporter(t *testing.T) {
	e := promtest.NewExporter(t)
	e.Set(`test_value{kind="a"}`, 42)
	s := promtest.Start(t, promtest.Scrape(e.Addr()))
	s.WaitFor(`test_value{kind="a"} == 42`, 30*time.Second)
	s.Stop()
	s.Restart()
	s.WaitFor(`up{job="test"} == 1`, 30*time.Second)
}
