package retry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/slotd/slotd/retry"
)

func TestDelayBounds(t *testing.T) {
	b := retry.Backoff{Min: 10 * time.Millisecond, Max: time.Second}
	for _, tc := range []struct {
		n        int
		min, max time.Duration
	}{
		{0, 10 * time.Millisecond, 10 * time.Millisecond},
		{1, 10 * time.Millisecond, 20 * time.Millisecond},
		{3, 10 * time.Millisecond, 80 * time.Millisecond},
		{7, 10 * time.Millisecond, time.Second},
		{100, 10 * time.Millisecond, time.Second}, // no overflow
	} {
		seen := map[time.Duration]bool{}
		for range 2000 {
			d := b.Delay(tc.n)
			if d < tc.min || d > tc.max {
				t.Fatalf("Delay(%d) = %v outside [%v, %v]", tc.n, d, tc.min, tc.max)
			}
			seen[d] = true
		}
		if tc.max > tc.min && len(seen) < 10 {
			t.Errorf("Delay(%d) took only %d distinct values: not jittered", tc.n, len(seen))
		}
	}
}

func TestDelayDegenerate(t *testing.T) {
	if d := (retry.Backoff{}).Delay(3); d != 0 {
		t.Fatalf("zero Backoff waits %v", d)
	}
	if d := (retry.Backoff{Min: time.Second, Max: time.Millisecond}).Delay(5); d != time.Second {
		t.Fatalf("Max below Min: %v, want Min", d)
	}
}

func ExampleBackoff() {
	b := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	d := b.Delay(4) // somewhere in [100ms, 1.6s]
	fmt.Println(d >= 100*time.Millisecond && d <= 1600*time.Millisecond)
	// Output: true
}

func TestDelayNoJitter(t *testing.T) {
	b := retry.Backoff{Min: 10 * time.Millisecond, Max: 300 * time.Millisecond, NoJitter: true}
	for n, want := range []time.Duration{10, 20, 40, 80, 160, 300, 300} {
		if d := b.Delay(n); d != want*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, d, want*time.Millisecond)
		}
	}
	if d := b.Delay(1000); d != 300*time.Millisecond {
		t.Errorf("Delay(1000) = %v, want Max", d)
	}
}

func TestJitter(t *testing.T) {
	b := retry.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for range 2000 {
		d := b.Jitter()
		if d < b.Min || d > b.Max {
			t.Fatalf("Jitter() = %v outside [%v, %v]", d, b.Min, b.Max)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("Jitter took only %d distinct values", len(seen))
	}
	if d := (retry.Backoff{Min: time.Second, Max: time.Millisecond}).Jitter(); d != time.Second {
		t.Errorf("Max below Min: Jitter() = %v, want Min", d)
	}
	if d := (retry.Backoff{Min: time.Millisecond, Max: time.Second, NoJitter: true}).Jitter(); d != time.Second {
		t.Errorf("NoJitter: Jitter() = %v, want Max", d)
	}
}

// A retry backoff as a task configures it: initial 10s, multiplier 3,
// max 5m, jitter 0.2.
func TestCeilFactorAndAround(t *testing.T) {
	b := retry.Backoff{Min: 10 * time.Second, Max: 5 * time.Minute, Factor: 3, Spread: 0.2}
	for n, want := range []time.Duration{10 * time.Second, 30 * time.Second, 90 * time.Second, 270 * time.Second, 5 * time.Minute, 5 * time.Minute} {
		if c := b.Ceil(n); c != want {
			t.Errorf("Ceil(%d) = %v, want %v", n, c, want)
		}
	}
	for _, tc := range []struct {
		n    int
		u    float64
		want time.Duration
	}{
		{0, 0, 8 * time.Second},    // 10s − 20%
		{0, 0.5, 10 * time.Second}, // the ceiling itself
		{0, 1, 12 * time.Second},   // 10s + 20%
		{1, 0.25, 27 * time.Second},
		{5, 1, 5 * time.Minute}, // never past Max
		{5, 0, 4 * time.Minute},
	} {
		if d := b.Around(tc.n, tc.u); d != tc.want {
			t.Errorf("Around(%d, %v) = %v, want %v", tc.n, tc.u, d, tc.want)
		}
	}
	if d := (retry.Backoff{Min: time.Second, Max: time.Minute, Factor: 1.5}).Around(2, 0.9); d != 2250*time.Millisecond {
		t.Errorf("no Spread: Around = %v, want the ceiling 2.25s", d)
	}
	if d := (retry.Backoff{}).Around(3, 0.5); d != 0 {
		t.Errorf("zero Backoff: Around = %v", d)
	}
}
