package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/lock/memlock"
)

// BenchmarkControllerPost prices telling the loop of the pause state of
// every task, as after a reload that changed the config's paused of all
// of them. The cost per task is the same at 1,000 tasks as at 10,000.
//
//	go test -run '^$' -bench ControllerPost -benchmem ./scheduler/
func BenchmarkControllerPost(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			task := testLoop(&testing.T{}, memlock.New(time.Now)).s.Tasks()[0]
			list := make([]Task, n)
			names := make([]string, n)
			for i := range list {
				list[i] = task
				list[i].Name = fmt.Sprintf("tick-%05d", i)
				names[i] = list[i].Name
			}
			inbox := newMailbox()
			c := newController(New(list, memlock.New(time.Now)), &inbox)
			var events []event
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c.post(names)
				if events = inbox.take(events); len(events) != n {
					b.Fatalf("%d events posted for %d tasks", len(events), n)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/task")
		})
	}
}
