package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/memlock"
)

// BenchmarkHoldBackWhileFull prices holding back a deferring run while
// this replica's claims are pending and the list of runs held back is
// full, nearly all of it still deferring: under sustained load claims are
// pending at every turn, and a held-back run leaves (its deferral over, or
// told of its slot) about as often as a new one is held back. The cost per
// run held back is the same at 1,000 runs held back as at 10,000.
//
//	go test -run '^$' -bench HoldBackWhileFull -benchmem ./scheduler/
func BenchmarkHoldBackWhileFull(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := testLoop(&testing.T{}, memlock.New(time.Now))
			at := time.Now().Truncate(time.Hour)
			rs := make([]*run, 2*n)
			for i := range rs {
				rs[i] = l.newRun(&l.s.Tasks()[0], at)
			}
			hold := func(r *run) {
				r.state = deferring
				l.schedule(r, time.Hour)
				l.holdBack(r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, r := range rs {
					l.unschedule(r)
				}
				l.deferred = make([]*run, 0, n)
				for _, r := range rs[:n] {
					hold(r)
				}
				b.StartTimer()
				for i := range n {
					rs[i].state = waiting // its deferral is over
					hold(rs[n+i])
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/held")
		})
	}
}

// BenchmarkPreferred prices choosing a slot's preferred claimant, which
// every replica does for every slot: one rendezvous weight per live
// replica, so the fleet's cost per slot grows with the square of its size.
//
//	go test -run '^$' -bench Preferred -count 3 ./scheduler/
func BenchmarkPreferred(b *testing.B) {
	for _, n := range []int{3, 12, 30} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("slotd-replica-%02d", i)
			}
			s := &Scheduler{replica: ids[0]}
			s.setLive(ids)
			slots := make([]lock.Slot, 1000)
			for i := range slots {
				slots[i] = lock.Slot{Task: fmt.Sprintf("tick-%05d", i), ID: "20261129185900"}
			}
			b.ResetTimer()
			for i := range b.N {
				s.preferred(slots[i%len(slots)])
			}
		})
	}
}
