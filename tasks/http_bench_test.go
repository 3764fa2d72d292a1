package tasks

import (
	"context"
	"net/http"
	"sync"
	"testing"
)

// The http plugin's cost per request against a loopback keep-alive sink,
// with the pool it uses (pooled) and with what it used before
// (default: net/http's default transport, which keeps 2 idle connections
// per host); pooled+output also gives each request an Output of its
// own, as the engine gives each attempt (output_tail's default). conns/op is connections opened per request; serial sends one
// request at a time, parallel keeps 16 per CPU in flight, burst sends
// waves of 64 at once and waits for each, as tasks due at one second do.
// Every figure is per request. Rerun with
//
//	go test -run '^$' -bench BenchmarkHTTP -benchtime 2000x ./tasks/
func BenchmarkHTTP(b *testing.B) {
	for _, tr := range []struct {
		name   string
		client func() *http.Client
		output bool // each request reports to an Output of its own, as an attempt's does
	}{
		{"pooled", func() *http.Client { return &http.Client{Transport: newHTTPTransport(DefaultHTTPPool)} }, false},
		{"pooled+output", func() *http.Client { return &http.Client{Transport: newHTTPTransport(DefaultHTTPPool)} }, true},
		{"default", func() *http.Client {
			return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		}, false},
	} {
		for _, mode := range []string{"serial", "parallel", "burst"} {
			b.Run(tr.name+"/"+mode, func(b *testing.B) {
				srv := newCountingServer(b, okHandler, false)
				f, _ := Lookup("http")
				task, err := f(map[string]any{"url": srv.URL + "/hook", "method": "POST", "body": `{"a":1}`}, nil)
				if err != nil {
					b.Fatal(err)
				}
				c := tr.client()
				defer c.CloseIdleConnections()
				task.(*httpTask).client = c
				base := WithRun(context.Background(), testRun())
				run := func() error {
					ctx := base
					if tr.output {
						ctx = WithOutput(ctx, NewOutput(DefaultOutputTail))
					}
					return task.Run(ctx)
				}
				b.ReportAllocs()
				b.ResetTimer()
				switch mode {
				case "serial":
					for b.Loop() {
						if err := run(); err != nil {
							b.Fatal(err)
						}
					}
				case "burst":
					const wave = 64
					for i := 0; i < b.N; i += wave {
						var wg sync.WaitGroup
						for range min(wave, b.N-i) {
							wg.Go(func() {
								if err := run(); err != nil {
									b.Error(err)
								}
							})
						}
						wg.Wait()
					}
				default:
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := run(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.ReportMetric(float64(srv.conns.Load())/float64(b.N), "conns/op")
			})
		}
	}
}
