package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/services/agent"
)

// fileConfig is the --config file: how configs are applied, validated and
// checked. Flags given on the command line override it (and add checks).
type fileConfig struct {
	Applier struct {
		Kind    string `json:"kind"`    // file | exec
		Path    string `json:"path"`    // file: the file written; exec file mode: where the config is written
		Command string `json:"command"` // exec: the command
		Mode    string `json:"mode"`    // exec: stdin | file
	} `json:"applier"`
	Validate      string      `json:"validate"`
	CheckTimeout  duration    `json:"checkTimeout"`
	CheckRetries  int         `json:"checkRetries"`
	CheckDeadline duration    `json:"checkDeadline"`
	Checks        []checkSpec `json:"checks"`
}

// checkSpec is one check of the config file; exactly one of Exec, TCP, HTTP
// and Interface is set.
type checkSpec struct {
	Name               string   `json:"name"`
	Exec               string   `json:"exec"`
	TCP                string   `json:"tcp"`
	RefusedIsReachable bool     `json:"refusedIsReachable"`
	HTTP               string   `json:"http"`
	ExpectStatus       int      `json:"expectStatus"`
	Interface          string   `json:"interface"`
	Timeout            duration `json:"timeout"`
	Retries            *int     `json:"retries"`
}

// duration reads "5s" style durations.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("%s is negative", s)
	}
	*d = duration(v)
	return nil
}

// loadConfig reads and checks the --config file.
func loadConfig(path string) (*fileConfig, error) {
	c := &fileConfig{}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		return nil, err
	}
	if c.CheckRetries < 0 {
		return nil, fmt.Errorf("checkRetries: %d is negative", c.CheckRetries)
	}
	for i, s := range c.Checks {
		if _, err := s.check(); err != nil {
			return nil, fmt.Errorf("checks[%d]: %w", i, err)
		}
		if s.Retries != nil && *s.Retries < 0 {
			return nil, fmt.Errorf("checks[%d].retries: %d is negative", i, *s.Retries)
		}
	}
	return c, nil
}

// check builds the agent's check from s.
func (s checkSpec) check() (agent.Check, error) {
	var out []agent.Check
	if s.Exec != "" {
		out = append(out, agent.ExecCheck{Label: s.Name, Command: s.Exec})
	}
	if s.TCP != "" {
		out = append(out, agent.TCPCheck{Label: s.Name, Addr: s.TCP, RefusedIsReachable: s.RefusedIsReachable})
	}
	if s.HTTP != "" {
		out = append(out, agent.HTTPCheck{Label: s.Name, URL: s.HTTP, ExpectStatus: s.ExpectStatus})
	}
	if s.Interface != "" {
		out = append(out, agent.InterfaceCheck{Label: s.Name, Interface: s.Interface})
	}
	if len(out) != 1 {
		return nil, errors.New("set exactly one of exec, tcp, http, interface")
	}
	return out[0], nil
}

// httpCheckFlag parses --check-http URL[=status]. A URL's query may hold
// "=", so only a trailing =NNN is a status.
func httpCheckFlag(v string) (checkSpec, error) {
	i := strings.LastIndex(v, "=")
	if i < 0 {
		return checkSpec{HTTP: v}, nil
	}
	n, err := strconv.Atoi(v[i+1:])
	if err != nil {
		return checkSpec{HTTP: v}, nil
	}
	if n < 100 || n > 599 {
		return checkSpec{}, fmt.Errorf("status %d is not an HTTP status", n)
	}
	return checkSpec{HTTP: v[:i], ExpectStatus: n}, nil
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ", ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
