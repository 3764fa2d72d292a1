package observe

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// contentSecurityPolicy allows the page nothing but its own inline style
// block, named by its hash: no script, no other resource, no framing, no
// form, no base URL. A value from the store that slipped past the
// template's escaping could run nothing.
var contentSecurityPolicy = "default-src 'none'; style-src '" + styleHash(pageHTML) +
	"'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// styleHash is the CSP source of the first <style> element of html.
func styleHash(html string) string {
	_, css, ok := strings.Cut(html, "<style>")
	css, _, ok2 := strings.Cut(css, "</style>")
	if !ok || !ok2 {
		panic("observe: the page has no <style> element")
	}
	sum := sha256.Sum256([]byte(css))
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
