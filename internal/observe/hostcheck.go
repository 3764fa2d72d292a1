package observe

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// CheckHost returns h behind a check of each request's Host, against DNS
// rebinding: a web page whose name an attacker points at 127.0.0.1 makes
// the victim's browser send it requests to a daemon listening on loopback,
// and read the answers, since to the browser they are the attacker's own
// origin. Such a request carries the attacker's name as its Host, so only
// these are answered: no Host (not a browser), an IP literal (no name to
// rebind), localhost and *.localhost (which browsers resolve to loopback
// themselves), the listen address's own host, and allowed (lower-case
// names; "*.example.com" matches any name ending in ".example.com").
// Anything else is 421 Misdirected Request, before h sees it.
func CheckHost(h http.Handler, listen string, allowed []string) http.Handler {
	own, _, err := net.SplitHostPort(listen)
	if err != nil {
		own = ""
	}
	own = strings.ToLower(own)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, own, allowed) {
			http.Error(w, fmt.Sprintf("Host %q is not one this daemon answers to (DNS rebinding): reach it by IP address, localhost, or a name in [http] allowed_hosts", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func hostAllowed(hostport, own string, allowed []string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "", net.ParseIP(host) != nil:
		return true
	case host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	case own != "" && host == own:
		return true
	}
	for _, a := range allowed {
		if suffix, wild := strings.CutPrefix(a, "*"); wild {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == a {
			return true
		}
	}
	return false
}
