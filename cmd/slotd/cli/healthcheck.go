package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/slotd/slotd/internal/config"
)

// defaultHealthURL is /healthz on the default [http] listen address.
var defaultHealthURL = "http://" + config.DefaultListen + "/healthz"

// cmdHealthcheck asks a running daemon's /healthz (or any URL) and exits 0
// on a 2xx answer, 1 otherwise. It exists for container HEALTHCHECKs: a
// distroless image has no curl or wget, but it has slotd.
func cmdHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("slotd healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", defaultHealthURL, "the URL to ask; healthy if it answers 2xx")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "slotd healthcheck: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "slotd healthcheck: -timeout %v must be positive\n", *timeout)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "slotd healthcheck: -url: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "slotd healthcheck: unhealthy: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "slotd healthcheck: unhealthy: %s: %s %q\n", *url, resp.Status, body)
		return exitError
	}
	fmt.Fprintf(stdout, "healthy: %s: %s\n", *url, resp.Status)
	return exitOK
}
