package quorum

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestQuorum(t *testing.T) {
	for _, c := range []struct{ n, want int }{{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {7, 4}} {
		if got := Of(c.n); got != c.want {
			t.Errorf("Of(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestValidity(t *testing.T) {
	for _, c := range []struct {
		lease, elapsed, want time.Duration
	}{
		{10 * time.Second, 0, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, time.Second, 9*time.Second - 102*time.Millisecond},
		{time.Second, 50 * time.Millisecond, 938 * time.Millisecond},
		{100 * time.Millisecond, 100 * time.Millisecond, -3 * time.Millisecond},
	} {
		if got := Validity(c.lease, c.elapsed); got != c.want {
			t.Errorf("Validity(%v, %v) = %v, want %v", c.lease, c.elapsed, got, c.want)
		}
	}
}

func TestFanOutOrderAndTimeout(t *testing.T) {
	var running atomic.Int32
	nodes := []int{0, 1, 2}
	res := FanOut(context.Background(), nodes, 50*time.Millisecond, func(ctx context.Context, n int) (int, error) {
		running.Add(1)
		defer running.Add(-1)
		if n == 1 { // a hung node: only its timeout ends it
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return n * 10, nil
	})
	if running.Load() != 0 {
		t.Fatal("fanOut returned with calls still running")
	}
	if res[0].Val != 0 || res[0].Err != nil || res[2].Val != 20 || res[2].Err != nil {
		t.Fatalf("results out of node order: %+v", res)
	}
	if !errors.Is(res[1].Err, context.DeadlineExceeded) {
		t.Fatalf("hung node: err = %v, want deadline exceeded", res[1].Err)
	}
}
