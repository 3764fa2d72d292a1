package tasks

import (
	"context"
	"strings"
	"sync"
	"unicode/utf8"
)

// Bounds of an attempt's Output, also those of the configuration's
// output_tail key.
const (
	// DefaultOutputTail is how many bytes of an attempt's output its
	// history entry keeps by default: the last 4 KiB.
	DefaultOutputTail = 4 << 10
	// MaxOutputTail bounds it: every entry of a task's history (about a
	// thousand) may hold that much, in Redis and in each view of it.
	MaxOutputTail = 64 << 10
)

// Output is where a task reports what one attempt printed or returned, for
// the run history: `slotd history`, the status API and page, and failure
// notifications show it. It keeps the last Limit bytes written, so a task
// may write as much as it likes at a bounded cost; writes never fail.
//
// The scheduler puts one in each attempt's context (OutputFrom). The exec
// plugin writes the command's combined stdout and stderr, the http plugin
// the response's status line and the start of its body. Write only what
// the task itself produced: output is shown to anyone who can read the
// status page, so never a request's headers, a credential or the daemon's
// environment.
//
// A nil *Output discards what is written to it, so a plugin can write to
// OutputFrom(ctx) whether or not an output is kept. It is safe for
// concurrent use.
type Output struct {
	mu    sync.Mutex
	tail  ring
	total int64 // bytes written
}

// NewOutput returns an Output that keeps the last limit bytes written
// (none if limit <= 0).
func NewOutput(limit int) *Output {
	return &Output{tail: ring{max: max(limit, 0)}}
}

// Write keeps the end of p. It never fails.
func (o *Output) Write(p []byte) (int, error) {
	if o == nil {
		return len(p), nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total += int64(len(p))
	o.tail.write(p)
	return len(p), nil
}

// WriteString is Write of a string.
func (o *Output) WriteString(s string) (int, error) {
	if o == nil {
		return len(s), nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total += int64(len(s))
	// At most the last max bytes are kept: copy no more than that.
	o.tail.write([]byte(s[max(len(s)-o.tail.max, 0):]))
	return len(s), nil
}

// Limit is how many bytes o keeps (0 for a nil Output): a task that
// reports the head of something rather than its tail, as the http plugin
// does with a response body, writes no more than this.
func (o *Output) Limit() int {
	if o == nil {
		return 0
	}
	return o.tail.max
}

// String returns the bytes kept, as valid UTF-8 (invalid bytes become
// U+FFFD) of at most Limit bytes. If earlier bytes were dropped it starts
// with "…" at a character boundary.
func (o *Output) String() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	b := o.tail.appendTo(make([]byte, 0, len(o.tail.buf)))
	dropped := o.total > int64(len(b))
	if dropped { // the ring may start inside a character
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if !dropped && len(s) <= o.tail.max {
		return s
	}
	// Earlier bytes were dropped, or invalid bytes grew into U+FFFD: keep
	// the tail that fits behind the mark.
	const mark = "…"
	room := o.tail.max - len(mark)
	if room <= 0 {
		return ""
	}
	if len(s) > room {
		s = s[len(s)-room:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return mark + s
}

type outputKey struct{}

// WithOutput returns a context carrying o, the output of the attempt it
// runs.
func WithOutput(ctx context.Context, o *Output) context.Context {
	return context.WithValue(ctx, outputKey{}, o)
}

// OutputFrom returns the Output carried by ctx, or nil (which discards
// writes) if it carries none.
func OutputFrom(ctx context.Context) *Output {
	o, _ := ctx.Value(outputKey{}).(*Output)
	return o
}

// ring keeps the last max bytes written to it. It grows as bytes arrive:
// most tasks write little.
type ring struct {
	buf []byte
	max int
	pos int // the oldest byte in buf; 0 until the ring wraps
}

func (r *ring) write(p []byte) {
	if r.max <= 0 {
		return
	}
	if len(p) >= r.max {
		r.buf, r.pos = append(r.buf[:0], p[len(p)-r.max:]...), 0
		return
	}
	k := min(r.max-len(r.buf), len(p))
	r.buf, p = append(r.buf, p[:k]...), p[k:]
	for len(p) > 0 { // full: overwrite the oldest bytes
		k = copy(r.buf[r.pos:], p)
		r.pos, p = (r.pos+k)%r.max, p[k:]
	}
}

// appendTo appends the kept bytes, oldest first, to dst.
func (r *ring) appendTo(dst []byte) []byte {
	return append(append(dst, r.buf[r.pos:]...), r.buf[:r.pos]...)
}
