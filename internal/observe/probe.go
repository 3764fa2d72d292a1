package observe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/slotd/slotd/tasks"
)

// ErrBadURL: Probe was given a URL it cannot ask.
var ErrBadURL = errors.New("observe: bad probe URL")

// Probe asks url (a daemon's /healthz, typically) with GET and returns its
// status line if it answers 2xx before ctx ends. Otherwise it returns why:
// ErrBadURL, the request's error, or the status and the start of the body.
// It is what `slotd healthcheck` runs, for container HEALTHCHECKs: a
// distroless image has no curl or wget, but it has slotd.
func Probe(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("%s: %s %q", tasks.RedactURLString(url), resp.Status, body)
	}
	return resp.Status, nil
}
