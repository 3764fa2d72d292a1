package main

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// scraper fetches every replica's /metrics every interval, gzipped, as a
// Prometheus server does, so that the CPU and peak RSS measured include
// what scraping costs a replica.
type scraper struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	took   []time.Duration
	bytes  int64
	errors int
}

// scrapeReport is what the scrapes took, over the whole run.
type scrapeReport struct {
	Every   string    `json:"every"`
	N       int       `json:"n"`
	Errors  int       `json:"errors"`   // a killed replica's included
	Took    latencies `json:"took"`     // request to last byte
	MeanKiB float64   `json:"mean_kib"` // the text, unzipped
}

func startScraper(reps []*replica, every time.Duration) *scraper {
	s := &scraper{stop: make(chan struct{})}
	// The transport asks for gzip, as Prometheus does, and unzips as it
	// reads: the replica compresses, the sizes counted are the text's.
	client := &http.Client{Timeout: 30 * time.Second}
	for _, r := range reps {
		s.wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-r.exited:
					return
				case <-t.C:
				}
				start := time.Now()
				n, err := scrapeOnce(client, "http://"+r.listen+"/metrics")
				s.mu.Lock()
				if err != nil {
					s.errors++
				} else {
					s.took = append(s.took, time.Since(start))
					s.bytes += n
				}
				s.mu.Unlock()
			}
		})
	}
	return s
}

func scrapeOnce(c *http.Client, url string) (int64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}

// finish stops the scrapes and reports them.
func (s *scraper) finish(every time.Duration) scrapeReport {
	close(s.stop)
	s.wg.Wait()
	rep := scrapeReport{Every: every.String(), N: len(s.took), Errors: s.errors, Took: summarise(s.took)}
	if rep.N > 0 {
		rep.MeanKiB = float64(s.bytes) / float64(rep.N) / 1024
	}
	return rep
}
