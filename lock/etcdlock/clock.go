package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ClockResample is how often the store's clock is measured again against
// a member's Date header. Between samples it runs on this process's
// monotonic clock, which drifts by parts per million.
const ClockResample = 30 * time.Second

// clockPoll is the spacing of the requests that look for the Date
// header's change of second: the estimate's uncertainty is about this plus
// one round trip.
const clockPoll = 10 * time.Millisecond

// serverClock is the etcd members' wall clock, read from the HTTP Date
// header of a member's /version (one-second resolution) at the moment it
// changes second, and carried forward on the monotonic clock.
//
// A sample is two answers in a row whose Date differ: the first was made
// before the server's clock reached the second k of the later one, the
// second at or after it. So the server's clock read k at a local instant
// between the first request's send (a) and the second answer's arrival
// (b): the server's time now is at least k + (now − b) and at most
// k + (now − a).
type serverClock struct {
	endpoints func() []string
	hc        *http.Client

	mu       sync.Mutex
	k        time.Time     // a second boundary of the server's clock
	b        time.Time     // the latest local instant it can have happened at (monotonic reading)
	unc      time.Duration // b − a
	sampled  time.Time     // local instant of the last sample (zero: none yet)
	sampling bool
	wg       sync.WaitGroup
}

func newServerClock(endpoints func() []string, hc *http.Client) *serverClock {
	return &serverClock{endpoints: endpoints, hc: hc}
}

// now returns the bounds of the server's clock now. The first call
// samples (up to about a second and a half); later calls sample again in
// the background every ClockResample.
func (c *serverClock) now(ctx context.Context) (lo, hi time.Time, err error) {
	c.mu.Lock()
	if c.sampled.IsZero() {
		c.mu.Unlock()
		if err := c.sample(ctx); err != nil {
			return time.Time{}, time.Time{}, err
		}
		c.mu.Lock()
	} else if !c.sampling && time.Since(c.sampled) >= ClockResample {
		c.sampling = true
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.sample(sctx) // a failure keeps the last sample, and tries again next time
			c.mu.Lock()
			c.sampling = false
			c.mu.Unlock()
		}()
	}
	defer c.mu.Unlock()
	lo = c.k.Add(time.Since(c.b))
	return lo, lo.Add(c.unc), nil
}

// wait waits for a background sample in flight.
func (c *serverClock) wait() { c.wg.Wait() }

// sample measures the server's clock once, on the first member that
// answers.
func (c *serverClock) sample(ctx context.Context) error {
	var errs []error
	for _, ep := range c.endpoints() {
		k, a, b, err := c.sampleOn(ctx, strings.TrimSuffix(ep, "/")+"/version")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		c.k, c.b, c.unc, c.sampled = k, b, b.Sub(a), time.Now()
		c.mu.Unlock()
		return nil
	}
	if len(errs) == 0 {
		return errors.New("no etcd endpoint to read the clock of")
	}
	return fmt.Errorf("clock: %w", errors.Join(errs...))
}

func (c *serverClock) sampleOn(ctx context.Context, url string) (k, a, b time.Time, err error) {
	first, a, _, err := c.date(ctx, url)
	if err != nil {
		return k, a, b, err
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return k, a, b, ctx.Err()
		case <-time.After(clockPoll):
		}
		d, sent, got, err := c.date(ctx, url)
		if err != nil {
			return k, a, b, err
		}
		if d.After(first) {
			return d, a, got, nil
		}
		a = sent
	}
	return k, a, b, fmt.Errorf("clock: the Date header of %s did not change second within 1.5s", url)
}

// date is one request's Date header, with its local send and arrival
// instants.
func (c *serverClock) date(ctx context.Context, url string) (d, sent, got time.Time, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return d, sent, got, err
	}
	sent = time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return d, sent, got, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	got = time.Now()
	d, err = http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return d, sent, got, fmt.Errorf("clock: %s: Date header %q: %w", url, resp.Header.Get("Date"), err)
	}
	return d, sent, got, nil
}
