package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
)

// cappedLoop is a loop at max_running 1 with one attempt running, and n
// runs of the "report" task's current slot, none capped yet.
func cappedLoop(n int) (*loop, []*run) {
	l := testLoop(&testing.T{}, memlock.New(time.Now))
	l.s.maxRunning = 1
	l.running = 1
	at := time.Now().Truncate(time.Hour)
	rs := make([]*run, n)
	for i := range rs {
		rs[i] = l.newRun(&l.s.Tasks()[0], at)
	}
	return l, rs
}

// capAll caps every run of rs, in order, on a loop at capacity.
func capAll(b *testing.B, l *loop, rs []*run) {
	for _, r := range rs {
		r.state = waiting
		l.advance(r, false)
		if r.state != capped {
			b.Fatalf("a run at capacity is %v, want capped", r.state)
		}
	}
}

// BenchmarkAdmit prices letting one capped run claim as the list of runs
// capped grows: attempts end one at a time under max_running (a replica
// with 10,000 slots due while its attempts are slow), each admitting the
// run capped longest. The cost per admission is the same at 1,000 capped
// runs as at 10,000.
//
//	go test -run '^$' -bench Admit -benchmem ./scheduler/
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l, rs := cappedLoop(n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				l.running = 1
				capAll(b, l, rs)
				l.running = 0
				b.StartTimer()
				for range n {
					l.admit()
					if len(l.claims) != 1 {
						b.Fatalf("%d claims after an admission; want 1", len(l.claims))
					}
					l.claims = l.claims[:0]
				}
				if len(l.capped) != 0 {
					b.Fatalf("%d runs still listed once all were admitted", len(l.capped))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/admission")
		})
	}
}

// BenchmarkCapRunWhileFull prices capping a run while the list of capped
// runs is full and nearly all of it still capped: at 10,000 slots/s
// under max_running, a run leaves the capped state (a peer took its
// slot, its window closed) about as often as a new one is capped. The
// cost per capped run is the same at 1,000 capped runs as at 10,000.
//
//	go test -run '^$' -bench CapRunWhileFull -benchmem ./scheduler/
func BenchmarkCapRunWhileFull(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l, rs := cappedLoop(2 * n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, r := range rs {
					l.uncap(r)
					r.listed = false
				}
				l.capped = make([]*run, 0, n)
				capAll(b, l, rs[:n])
				b.StartTimer()
				for i := range n {
					l.uncap(rs[i])
					capAll(b, l, rs[n+i:n+i+1])
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/capped")
		})
	}
}
