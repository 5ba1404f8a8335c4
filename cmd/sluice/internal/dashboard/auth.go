package dashboard

import (
	"compress/gzip"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// cookieName holds the token the page's login stored.
const cookieName = "sluice_dashboard_token"

// authed refuses a request without the token, when one is set.
func (srv *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if srv.opts.Token != "" && !srv.tokenOK(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			httpError(w, http.StatusUnauthorized, "token", "this dashboard requires its token: send Authorization: Bearer TOKEN, or log in on the page")
			return
		}
		h(w, r)
	}
}

func (srv *Server) tokenOK(r *http.Request) bool {
	got := ""
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		got = strings.TrimPrefix(a, "Bearer ")
	} else if c, err := r.Cookie(cookieName); err == nil {
		got = c.Value
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(srv.opts.Token)) == 1
}

// jsonBody refuses a body that is not JSON, which a cross-site form cannot
// send without a preflight (guard, hosts.go, checks where a state-changing
// request comes from).
func jsonBody(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			httpError(w, http.StatusUnsupportedMediaType, "Content-Type", "send the body as application/json")
			return
		}
		h(w, r)
	}
}

// handleLogin is POST /api/v1/login {"token": "…"}: with the right token it
// sets the cookie the page then sends (HttpOnly: no script reads it;
// SameSite=Strict: no other site's page sends it).
func (srv *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		httpError(w, http.StatusBadRequest, "body", "want {\"token\": \"…\"}: "+err.Error())
		return
	}
	if srv.opts.Token == "" {
		writeJSON(w, http.StatusOK, map[string]any{"loggedIn": true, "note": "this dashboard needs no token"})
		return
	}
	if subtle.ConstantTimeCompare([]byte(body.Token), []byte(srv.opts.Token)) != 1 {
		httpError(w, http.StatusUnauthorized, "token", "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: srv.opts.Token, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	writeJSON(w, http.StatusOK, map[string]any{"loggedIn": true})
}

// apiError is every error the API answers with: what was wrong, and the
// field or header it was about when there is one.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func httpError(w http.ResponseWriter, code int, field, msg string) {
	writeJSON(w, code, apiError{Error: msg, Field: field})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// gzipped compresses what h writes when the client accepts gzip: a
// fleet's JSON shrinks about fiftyfold. A stream's writer flushes the
// compressor with every message (Flush), so nothing waits in it.
func gzipped(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !acceptsGzip(r) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		h.ServeHTTP(&gzipWriter{ResponseWriter: w, gz: gz}, r)
	})
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}

type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (g *gzipWriter) WriteHeader(code int) {
	g.Header().Del("Content-Length")
	g.ResponseWriter.WriteHeader(code)
}

func (g *gzipWriter) Write(b []byte) (int, error) { return g.gz.Write(b) }

// Flush sends what was compressed so far.
func (g *gzipWriter) Flush() {
	_ = g.gz.Flush()
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
