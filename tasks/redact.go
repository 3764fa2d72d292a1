package tasks

import (
	"errors"
	"net/url"
	"strings"
)

// redacted stands for a secret, as net/url's URL.Redacted writes a password.
const redacted = "xxxxx"

// RedactURL returns u as a string fit for a log, an error, a page or an
// API: the password of its userinfo and the value of every query
// parameter are replaced by "xxxxx" (the user name and the parameter names
// are kept: they say which credential without being one). A token in a
// query string (?api_key=...) is as secret as a password, and slotd cannot
// tell which parameters are tokens. It is the one redaction of a URL in
// slotd. A nil u is "".
func RedactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	r := *u
	if _, has := r.User.Password(); has {
		r.User = url.UserPassword(r.User.Username(), redacted)
	}
	if r.RawQuery != "" {
		r.RawQuery = redactQuery(r.RawQuery)
	}
	r.ForceQuery = false
	return r.String()
}

// RedactURLString is RedactURL of s parsed; a string that does not parse as
// a URL is withheld whole, since where its secrets are cannot be known.
func RedactURLString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL withheld)"
	}
	return RedactURL(u)
}

// redactQuery keeps each parameter's name and order and replaces its value;
// a part without "=" may be a bare token and is replaced whole.
func redactQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if name, _, ok := strings.Cut(p, "="); ok {
			parts[i] = name + "=" + redacted
		} else if p != "" {
			parts[i] = redacted
		}
	}
	return strings.Join(parts, "&")
}

// parseErrorKind is why url.Parse refused a URL, without the fragment of
// it that its error quotes (`invalid port ":s3cr" after host` is a piece
// of a password when the password holds a "/").
func parseErrorKind(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	kind, _, _ := strings.Cut(err.Error(), `"`)
	return strings.TrimSpace(kind)
}

// redactError returns err with the URL of every *url.Error in its chain
// redacted: net/http's client quotes the whole URL in its errors (the
// request's, or a redirect's).
func redactError(err error) error {
	for e := err; e != nil; {
		var ue *url.Error
		if !errors.As(e, &ue) {
			break
		}
		ue.URL = RedactURLString(ue.URL)
		e = ue.Err
	}
	return err
}
