package scheduler

import (
	"container/heap"
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
	"github.com/slotd/slotd/scheduler/schedule"
)

// BenchmarkFireDeferred measures the fire path of a slot this replica
// leaves to its preferred claimant, with 12 replicas live: the fire heap,
// the pause check, the slot (its id and deadline), the rendezvous choice
// over the live ids, and the deferral's list entry, 1000 hourly slots (a
// cron spec: the window ends at the next fire time) an iteration, each
// the current hour's; the deferral is forgotten unread.
//
//	go test -run '^$' -bench FireDeferred -benchmem ./scheduler/
func BenchmarkFireDeferred(b *testing.B) {
	const n = 1000
	l := testLoop(&testing.T{}, memlock.New(time.Now))
	defer l.watchReleases()()
	live := make([]string, 12)
	for i := range live {
		live[i] = fmt.Sprintf("replica-%02d-%d", i, 40000+i)
	}
	l.s.setLive(live)
	hourly, err := schedule.Parse("0 0 * * * *", "")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now().Truncate(time.Hour)
	fires := make([]*fire, n)
	for i := range fires {
		task := l.s.Tasks()[0]
		task.Name, task.Spec, task.Schedule = fmt.Sprintf("tick-%05d", i), "0 0 * * * *", hourly
		l.current[task.Name] = &task
		fires[i] = newFire(&task, at)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		at = time.Now().Truncate(time.Hour)
		l.fires = l.fires[:0]
		for _, f := range fires {
			f.next = at
			f.setDue(at)
			l.fires = append(l.fires, f)
		}
		heap.Init(&l.fires)
		l.fireDue()
		l.closeFiring()
		if len(l.checks) != 1 || len(l.checks[0].slots) != n {
			b.Fatalf("%d deferrals: want one of %d slots", len(l.checks), n)
		}
		l.unlist(heap.Pop(&l.checks).(*deferral))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/slot")
}

// BenchmarkReleaseNotices prices a release notice of a listed slot as the
// deferral it is in grows: a burst of failures releases a whole
// deferral's slots, in the order they were listed. Its tasks are removed
// after the listing, so a notice only unlists (no run to claim with): the
// cost per notice is the same at 1,000 slots as at 10,000.
func BenchmarkReleaseNotices(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			l := testLoop(&testing.T{}, memlock.New(time.Now))
			defer l.watchReleases()()
			l.s.setLive([]string{"peer"})
			at := time.Now().Truncate(time.Hour)
			ts := make([]*Task, n)
			for i := range ts {
				task := l.s.Tasks()[0]
				task.Name = fmt.Sprintf("tick-%05d", i)
				ts[i] = &task
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, t := range ts {
					l.current[t.Name] = t
					l.onFire(t, at)
				}
				l.closeFiring()
				if len(l.checks) != 1 || len(l.checks[0].slots) != n {
					b.Fatalf("%d deferrals: want one of %d slots", len(l.checks), n)
				}
				for _, t := range ts {
					delete(l.current, t.Name)
				}
				b.StartTimer()
				for _, t := range ts {
					l.onReleaseNotice(slotName{t.Name, t.Schedule.SlotID(at)})
				}
				if len(l.checks) != 0 {
					b.Fatalf("%d deferrals left once every slot was released; want none", len(l.checks))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/notice")
		})
	}
}
