package scheduler

import (
	"context"
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

// BenchmarkControllerReadOne prices the read that a notice of one task
// brings (an operator pausing, resuming or triggering tasks one at a
// time), with a triggered slot of every task still in its window. The
// cost per notice is the same at 1,000 tasks as at 10,000.
//
//	go test -run '^$' -bench ControllerReadOne -benchmem ./scheduler/
func BenchmarkControllerReadOne(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			task := testLoop(&testing.T{}, memlock.New(time.Now)).s.Tasks()[0]
			list := make([]Task, n)
			for i := range list {
				list[i] = task
				list[i].Name = fmt.Sprintf("tick-%05d", i)
			}
			inbox := newMailbox()
			c := newController(New(list, memlock.New(time.Now)), &inbox)
			deadline := time.Now().Add(time.Hour)
			for i := range list {
				c.seen[fmt.Sprintf("tick-%05d:trigger-%d", i, i)] = deadline
			}
			ctx := context.Background()
			one := []string{list[n/2].Name}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				c.read(ctx, one)
			}
			b.StopTimer()
			if len(c.seen) != n {
				b.Fatalf("%d triggered slots remembered, want %d", len(c.seen), n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/notice")
		})
	}
}
