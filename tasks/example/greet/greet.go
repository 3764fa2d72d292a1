package greet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/slotd/slotd/tasks"
)

func init() { tasks.Register("greet", newGreet) }

type params struct {
	Greeting     string `toml:"greeting"`
	FailAttempts int    `toml:"fail_attempts"`
}

type greet struct {
	params
	log *slog.Logger
}

func newGreet(raw map[string]any, log *slog.Logger) (tasks.Task, error) {
	p := params{Greeting: "hello"}
	if err := tasks.Decode(raw, &p); err != nil {
		return nil, fmt.Errorf("greet: %w", err)
	}
	if p.FailAttempts < 0 {
		return nil, fmt.Errorf(`greet: parameter "fail_attempts": must not be negative, not %d`, p.FailAttempts)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &greet{params: p, log: log}, nil
}

func (g *greet) Run(ctx context.Context) error {
	r, ok := tasks.RunFrom(ctx)
	if !ok {
		// slotd always supplies the attempt; only a bare test would not.
		return errors.New("greet: no attempt in the context")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("greet: %w", context.Cause(ctx))
	}
	if r.Attempt <= g.FailAttempts {
		return fmt.Errorf("greet: slot %s: failing attempt %d of %d on purpose", r.Slot, r.Attempt, g.FailAttempts)
	}
	// What the attempt reports for its run history: `slotd history`, the
	// status page. Only what the task itself produced, never a secret.
	fmt.Fprintf(tasks.OutputFrom(ctx), "%s (slot %s, attempt %d)\n", g.Greeting, r.Slot, r.Attempt)
	g.log.LogAttrs(ctx, slog.LevelInfo, g.Greeting,
		slog.String("slot", r.Slot),
		slog.Int("attempt", r.Attempt),
		slog.Int64("fencing_token", r.Token),
		slog.String("replica", r.Replica),
	)
	return nil
}
