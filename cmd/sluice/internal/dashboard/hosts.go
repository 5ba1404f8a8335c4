package dashboard

// hosts.go: the names the dashboard answers to. A page a browser loaded
// from http://evil.example:3100 may call http://evil.example:3100/api/…
// as its own origin; when evil.example's DNS answer then turns to
// 127.0.0.1 (DNS rebinding) those calls reach a loopback dashboard with
// Host, Origin and Sec-Fetch-Site all saying "same origin". The one thing
// the attacker cannot choose is the name this server serves, so every
// request must name it in its Host header, and every state-changing one
// must come from a page of one of those names (Origin):
//
//   - the address the connection arrived at (the listen address as bound,
//     with its actual port; on a wildcard listener, the interface address
//     the client reached), as an IP literal with that port;
//   - localhost and every loopback literal (127.0.0.1, [::1]) with that port
//     (an SSH tunnel or a port published on loopback reaches it so);
//   - the host of --addr when it is a name (--addr dash.internal:3100);
//   - the names given with --allowed-host NAME[:PORT] (a reverse proxy's):
//     NAME alone with any port or none, NAME:PORT with that port only.
//
// Anything else is refused with 421 Misdirected Request before any handler
// runs, the page's files and the event stream included.

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// hostRule is one name --allowed-host allows; port "" allows any port.
type hostRule struct{ name, port string }

func (h hostRule) String() string {
	if h.port == "" {
		return h.name
	}
	return net.JoinHostPort(h.name, h.port)
}

// hosts are the names a dashboard answers to besides its own addresses.
type hosts struct {
	// addrName is the host of --addr when it is a name, not an IP.
	addrName string
	rules    []hostRule
	// flag names --allowed-host as the user gives it, for errors.
	flag string
}

// parseHosts checks the --allowed-host values: NAME, NAME:PORT, an IP or
// [IPv6]:PORT; never a URL.
func parseHosts(flag, addr string, list []string) (hosts, error) {
	hs := hosts{flag: flag}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && net.ParseIP(h) == nil {
		hs.addrName = strings.ToLower(h)
	}
	for _, v := range list {
		v = strings.TrimSpace(v)
		if v == "" {
			return hosts{}, fmt.Errorf("%s: an empty name; give NAME or NAME:PORT, such as dashboard.example.com", flag)
		}
		if strings.ContainsAny(v, "/@?#* ") {
			return hosts{}, fmt.Errorf("%s %q: give the name only, NAME or NAME:PORT (no scheme, path or wildcard), such as dashboard.example.com:443", flag, v)
		}
		name, port := splitHost(v)
		if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return hosts{}, fmt.Errorf("%s %q: the port %q is not a number from 1 to 65535", flag, v, port)
			}
		}
		if name == "" || strings.Contains(name, ":") && net.ParseIP(name) == nil {
			return hosts{}, fmt.Errorf("%s %q: want NAME or NAME:PORT (an IPv6 address with a port in brackets: [fd00::1]:3100)", flag, v)
		}
		hs.rules = append(hs.rules, hostRule{name: name, port: port})
	}
	return hs, nil
}

// CheckAllowedHosts checks --allowed-host values as New does, so that a
// command can refuse them before it starts anything.
func CheckAllowedHosts(flag string, list []string) error {
	_, err := parseHosts(flag, "", list)
	return err
}

// splitHost splits a Host header (or an Origin's host) into its lowercased
// name, without brackets, and its port ("" when it names none).
func splitHost(hostport string) (name, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return strings.ToLower(h), p
	}
	if ip := net.ParseIP(hostport); ip != nil { // a bare IPv6 literal
		return strings.ToLower(hostport), ""
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")), ""
}

// allowed says whether hostport names this dashboard, for a connection
// that arrived at local (nil when unknown: then only the rules count).
func (hs hosts) allowed(hostport string, local net.Addr) bool {
	if hostport == "" {
		return false
	}
	name, port := splitHost(hostport)
	for _, r := range hs.rules {
		if r.name == name && (r.port == "" || r.port == port) {
			return true
		}
	}
	tcp, ok := local.(*net.TCPAddr)
	if !ok {
		return false
	}
	lport := strconv.Itoa(tcp.Port)
	if port == "" && lport == "80" { // a browser leaves out http's own port
		port = "80"
	}
	if port != lport {
		return false
	}
	if name == "localhost" || (hs.addrName != "" && name == hs.addrName) {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && (ip.IsLoopback() || ip.Equal(tcp.IP))
}

// names lists what a connection that arrived at local may name, for an
// error.
func (hs hosts) names(local net.Addr) string {
	var out []string
	if tcp, ok := local.(*net.TCPAddr); ok {
		p := strconv.Itoa(tcp.Port)
		if !tcp.IP.IsLoopback() && !tcp.IP.IsUnspecified() {
			out = append(out, net.JoinHostPort(tcp.IP.String(), p))
		}
		if hs.addrName != "" {
			out = append(out, net.JoinHostPort(hs.addrName, p))
		}
		out = append(out, "localhost:"+p, "127.0.0.1:"+p, "[::1]:"+p)
	}
	for _, r := range hs.rules {
		out = append(out, r.String())
	}
	return strings.Join(out, ", ")
}

func localAddr(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return a
}

// safeMethod: a method that only reads.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// guard wraps the whole dashboard. Every request must name this server in
// its Host header (421 otherwise); every state-changing one must come from
// the dashboard's own page: not cross-site by Sec-Fetch-Site, and with an
// Origin, if it has one, whose host is one of the same names. A client that
// is not a browser sends neither header and authenticates with its token.
func (srv *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := localAddr(r)
		if !srv.hosts.allowed(r.Host, local) {
			srv.logRefused(r.Host)
			name, _ := splitHost(r.Host)
			if name == "" {
				name = "NAME"
			}
			httpError(w, http.StatusMisdirectedRequest, "Host",
				fmt.Sprintf("Host %q is not a name this dashboard serves (it answers %s): a page reached by another name may be "+
					"another site's (DNS rebinding), so nothing is read or run for it; if the name is yours, such as a reverse proxy's, "+
					"start the dashboard with %s %s", r.Host, srv.hosts.names(local), srv.hosts.flag, name))
			return
		}
		if !safeMethod(r.Method) {
			if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
				httpError(w, http.StatusForbidden, "Sec-Fetch-Site", "cross-site request refused (Sec-Fetch-Site: "+site+"): use the dashboard's own page")
				return
			}
			if o := r.Header.Get("Origin"); o != "" {
				u, err := url.Parse(o)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !srv.hosts.allowed(u.Host, local) {
					httpError(w, http.StatusForbidden, "Origin", fmt.Sprintf("cross-site request refused: Origin %q is not a page of this dashboard (%s); use the dashboard's own page, or %s NAME if the page's name is yours",
						o, srv.hosts.names(local), srv.hosts.flag))
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// maxRefusedLogged bounds the Hosts whose refusal is logged: a page may
// send any number of names.
const maxRefusedLogged = 64

// logRefused logs the first refusal of each Host (a proxy left out of
// --allowed-host shows at once), up to maxRefusedLogged of them.
func (srv *Server) logRefused(host string) {
	srv.refusedMu.Lock()
	defer srv.refusedMu.Unlock()
	if _, seen := srv.refused[host]; seen || len(srv.refused) >= maxRefusedLogged {
		return
	}
	if srv.refused == nil {
		srv.refused = map[string]struct{}{}
	}
	srv.refused[host] = struct{}{}
	srv.opts.Logf("dashboard: refused a request for Host %q (421): not a name it serves; if the name is yours, give %s %s (logged once per Host)",
		host, srv.hosts.flag, host)
}
