package cli

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// lateHandler is a slog.Handler whose destination is chosen after it is
// handed out. `slotd run` reads its file once, and the plugins are built
// (and given their loggers) while it is read, before the [log] settings
// the file holds are known; set names the handler those settings describe.
// Records logged before set are kept and sent to it then.
type lateHandler struct {
	dest *lateDest
	// wrap applies the WithAttrs and WithGroup calls made on this handler
	// to the destination.
	wrap     func(slog.Handler) slog.Handler
	resolved atomic.Pointer[slog.Handler] // wrap(dest), once dest is set
}

// lateDest is the destination that the handlers derived from one
// lateHandler share.
type lateDest struct {
	mu      sync.Mutex
	h       slog.Handler // nil until set
	pending []lateRecord // logged before set
}

type lateRecord struct {
	ctx  context.Context
	wrap func(slog.Handler) slog.Handler
	r    slog.Record
}

func newLateHandler() *lateHandler {
	return &lateHandler{dest: &lateDest{}, wrap: func(h slog.Handler) slog.Handler { return h }}
}

// set sends every record from now on to h, and first those logged so far.
func (l *lateHandler) set(h slog.Handler) {
	l.dest.mu.Lock()
	l.dest.h = h
	pending := l.dest.pending
	l.dest.pending = nil
	l.dest.mu.Unlock()
	for _, p := range pending {
		if w := p.wrap(h); w.Enabled(p.ctx, p.r.Level) {
			_ = w.Handle(p.ctx, p.r)
		}
	}
}

// target returns the destination with this handler's attributes and
// groups, or nil before set.
func (l *lateHandler) target() slog.Handler {
	if h := l.resolved.Load(); h != nil {
		return *h
	}
	l.dest.mu.Lock()
	base := l.dest.h
	l.dest.mu.Unlock()
	if base == nil {
		return nil
	}
	h := l.wrap(base)
	l.resolved.Store(&h)
	return h
}

func (l *lateHandler) Enabled(ctx context.Context, level slog.Level) bool {
	if h := l.target(); h != nil {
		return h.Enabled(ctx, level)
	}
	return true // decided when the record is sent on
}

func (l *lateHandler) Handle(ctx context.Context, r slog.Record) error {
	if h := l.target(); h != nil {
		return h.Handle(ctx, r)
	}
	l.dest.mu.Lock()
	if l.dest.h == nil {
		l.dest.pending = append(l.dest.pending, lateRecord{context.WithoutCancel(ctx), l.wrap, r.Clone()})
		l.dest.mu.Unlock()
		return nil
	}
	l.dest.mu.Unlock()
	return l.target().Handle(ctx, r) // set in between
}

func (l *lateHandler) WithAttrs(as []slog.Attr) slog.Handler {
	wrap := l.wrap
	return &lateHandler{dest: l.dest, wrap: func(h slog.Handler) slog.Handler { return wrap(h).WithAttrs(as) }}
}

func (l *lateHandler) WithGroup(name string) slog.Handler {
	wrap := l.wrap
	return &lateHandler{dest: l.dest, wrap: func(h slog.Handler) slog.Handler { return wrap(h).WithGroup(name) }}
}
