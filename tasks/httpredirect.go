package tasks

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// The values of the http plugin's follow_redirects parameter.
const (
	// RedirectsNone follows no redirect: the 3xx response is the
	// request's response (a failure unless expect lists its status).
	RedirectsNone = "none"
	// RedirectsSameHost, the default, follows a redirect only to the
	// origin of the task's url (the same scheme, host and port); a
	// redirect elsewhere fails the request without sending it.
	RedirectsSameHost = "same-host"
	// RedirectsAny follows a redirect anywhere, but a hop to another
	// origin carries none of the task's configured headers but
	// redirectSafeHeaders.
	RedirectsAny = "any"
)

// maxRedirects is how many redirects one request follows, as net/http's
// default client does.
const maxRedirects = 10

// redirectSafeHeaders are the configured headers a hop to another origin
// keeps under follow_redirects = "any": they describe the request, not
// who sends it. Every other configured header (Authorization, Cookie,
// X-Api-Key, whatever a receiver takes as a credential) is dropped, since
// slotd cannot tell a secret from a plain value. slotd's own Slotd-*
// headers are facts of the slot, not credentials: they are kept.
var redirectSafeHeaders = map[string]bool{
	"Accept": true, "Accept-Encoding": true, "Accept-Language": true,
	"Content-Type": true, "User-Agent": true,
}

// errRedirectRefused is the cause of a request that was redirected to
// another origin under follow_redirects = "same-host".
var errRedirectRefused = errors.New(`redirect to another host refused (follow_redirects = "same-host"; "any" follows it without the configured headers)`)

// parseRedirects validates the follow_redirects parameter.
func parseRedirects(v string) (string, error) {
	switch v {
	case "":
		return RedirectsSameHost, nil
	case RedirectsNone, RedirectsSameHost, RedirectsAny:
		return v, nil
	}
	return "", fmt.Errorf(`tasks: http: parameter "follow_redirects": %q: want "none", "same-host" or "any"`, v)
}

// origin is what "the same host" means to follow_redirects: the scheme,
// the host name (case-insensitive) and the port, the default one filled
// in. A hop from https to http on one host is another origin: the headers
// would cross the network in clear text.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// checkRedirect is the client's CheckRedirect for a task whose policy is
// policy. req is the next hop, via the requests made so far (via[0] the
// task's own). net/http has already copied the headers and set a Referer
// (the previous URL, its query included, which may hold a secret): this
// removes the Referer on every hop and, on a hop to another origin, every
// configured header but redirectSafeHeaders.
func checkRedirect(policy string) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if policy == RedirectsNone {
			return http.ErrUseLastResponse
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		req.Header.Del("Referer")
		if origin(req.URL) == origin(via[0].URL) {
			return nil
		}
		if policy != RedirectsAny {
			return fmt.Errorf("to %s: %w", origin(req.URL), errRedirectRefused)
		}
		for k := range req.Header {
			if !redirectSafeHeaders[k] && !strings.HasPrefix(k, "Slotd-") {
				delete(req.Header, k)
			}
		}
		return nil
	}
}
