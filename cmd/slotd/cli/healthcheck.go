package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/observe"
)

// defaultHealthURL is /healthz on the default [http] listen address.
var defaultHealthURL = "http://" + config.DefaultListen + "/healthz"

// cmdHealthcheck asks a running daemon's /healthz (or any URL) with
// observe.Probe and exits 0 on a 2xx answer, 1 otherwise.
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
	status, err := observe.Probe(ctx, *url)
	switch {
	case errors.Is(err, observe.ErrBadURL):
		fmt.Fprintf(stderr, "slotd healthcheck: -url: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "slotd healthcheck: unhealthy: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "healthy: %s: %s\n", *url, status)
	return exitOK
}
