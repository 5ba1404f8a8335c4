package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.Write([]byte(`{"status":"ok"}`))
		default:
			http.Error(w, `{"status":"unavailable","error":"JetStream has not established contact with a meta leader"}`, http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name     string
		url      string
		wantCode int
		wantOut  string
	}{
		{name: "200", url: srv.URL + "/healthz", wantCode: 0, wantOut: `{"status":"ok"}`},
		{name: "503", url: srv.URL + "/other", wantCode: 1, wantOut: "meta leader"},
		{name: "nothing listening", url: "http://127.0.0.1:1/healthz", wantCode: 1, wantOut: "connection refused"},
		{name: "not a URL", url: "::", wantCode: 1, wantOut: "missing protocol scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			if code := probe(tt.url, &out); code != tt.wantCode {
				t.Errorf("exit code %d, want %d (output %q)", code, tt.wantCode, out.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("output %q does not say %q", out.String(), tt.wantOut)
			}
		})
	}
}
