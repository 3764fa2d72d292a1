package observe

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// contentSecurityPolicy allows a response nothing but the pages' style
// sheet, named by its hash, and forms that submit to this server (the
// overview's filter, a GET): no script, no other resource, no framing, no
// base URL. A value from the store that slipped past the template's
// escaping could run nothing.
var contentSecurityPolicy = "default-src 'none'; style-src '" + sourceHash(pageCSS) +
	"'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// taskPagePolicy is contentSecurityPolicy for a task's page, which adds
// its one script, named by its hash, and lets that script call this
// server's API (its action buttons) and nothing else.
var taskPagePolicy = contentSecurityPolicy + "; script-src '" + sourceHash(taskJS) + "'; connect-src 'self'"

// sourceHash is the CSP source that allows an inline element whose text
// is src.
func sourceHash(src string) string {
	sum := sha256.Sum256([]byte(src))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// secure sets the security headers on every response of h: the page and
// the API are unauthenticated and must not be framed, sniffed into
// another type, or leak their URL to another site.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
