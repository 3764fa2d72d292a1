package keepalive

import (
	"context"
	"testing"
	"time"
)

// BenchmarkKeepStop is what a lease's watchdog costs a lease that needs no
// renewal (a task shorter than a third of its lease: most of them): kept,
// then stopped.
//
//	go test -run '^$' -bench KeepStop -benchmem ./lock/internal/keepalive/
func BenchmarkKeepStop(b *testing.B) {
	renew := func(context.Context) error { b.Error("renewed"); return nil }
	onLost := func(why error) error { b.Errorf("lost: %v", why); return why }
	ctx := context.Background()
	h := &holder{renew, nil, onLost} // an owner is a pointer: no allocation to box it
	for b.Loop() {
		var k Lease
		k.Keep(ctx, time.Minute, 6*time.Second, time.Now(), h)
		if _, valid := k.Stop(); !valid {
			b.Fatal("stopped invalid")
		}
	}
}
