package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

func init() { Register("exec", newExec) }

// Defaults of the exec plugin's parameters.
const (
	DefaultExecGrace     = 10 * time.Second
	DefaultExecMaxOutput = 64 << 10
)

// outputDrain bounds how long Run waits, once the command has exited and
// been cleaned up after, for the end of its output. Under the supervisor
// nothing is left to hold the pipe by then. Run directly, a process that
// left the group (setsid, a double fork into a new group) can keep it open
// longer, and it must not hold the attempt hostage.
const outputDrain = 2 * time.Second

// errTailMax bounds the output quoted in an error message; the whole
// bounded output is in ExitError.Output and in the log.
const errTailMax = 1 << 10

// envNames are the variables Run sets from the slot's Run. They cannot be
// set through the env parameter: a task must be able to trust them.
var envNames = []string{
	"SLOTD_TASK", "SLOTD_SLOT", "SLOTD_SLOT_TIME",
	"SLOTD_ATTEMPT", "SLOTD_FENCING_TOKEN", "SLOTD_REPLICA", "SLOTD_STORE_REVISION",
	"SLOTD_FAILURE", "SLOTD_FAILURE_REASON", "SLOTD_ATTEMPTS", "SLOTD_LAST_ERROR", "SLOTD_OUTPUT", // an on_failure hook's (failure.go)
}

type execParams struct {
	Command   []string          `toml:"command"`
	Dir       string            `toml:"dir"`
	Env       map[string]string `toml:"env"`
	Grace     Duration          `toml:"grace"`
	MaxOutput int               `toml:"max_output"`
}

type execTask struct {
	path      string   // resolved at load, so a PATH lookup cannot fail later
	argv      []string // as configured: argv[0] is what the command sees
	dir       string
	env       []string // "K=V" from the env parameter, sorted
	grace     time.Duration
	maxOutput int
	log       *slog.Logger

	start func(command) (process, error) // nil: startProcess; tests set startDirect
}

func newExec(params map[string]any, log *slog.Logger) (Task, error) {
	p := execParams{
		Grace:     Duration{DefaultExecGrace},
		MaxOutput: DefaultExecMaxOutput,
	}
	// Every problem is reported, not only the first: a misspelt parameter
	// must not hide a command that is not installed.
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("tasks: exec: "+format, args...)) }
	if err := Decode(params, &p); err != nil {
		for _, e := range splitJoined(err) {
			bad("%w", e)
		}
	}
	_, commandGiven := params["command"]
	switch {
	case p.Command == nil && !commandGiven:
		bad(`parameter "command" is required`)
	case p.Command == nil: // did not decode: reported
	case len(p.Command) == 0:
		bad(`parameter "command" is empty`)
	case p.Command[0] == "":
		bad(`parameter "command": the program name is empty`)
	}
	if p.Grace.Duration <= 0 {
		bad(`parameter "grace": must be positive, not %q`, p.Grace)
	}
	if p.MaxOutput <= 0 {
		bad(`parameter "max_output": must be positive, not %d`, p.MaxOutput)
	}
	nul := false
	for _, a := range p.Command {
		if strings.IndexByte(a, 0) >= 0 {
			bad(`parameter "command": argument %q contains a NUL byte`, a)
			nul = true
		}
	}

	var path string
	if len(p.Command) > 0 && p.Command[0] != "" && !nul {
		path = p.Command[0]
		if !strings.Contains(path, "/") {
			// Resolve now so that a typo is a load error, not a failure at
			// the first fire time hours later.
			var err error
			if path, err = exec.LookPath(path); err != nil {
				bad(`parameter "command": %q not found: %w`, p.Command[0], err)
			}
		}
	}
	if p.Dir != "" {
		// Checked now for the same reason; it can still vanish later, and
		// then the attempt fails to start.
		switch fi, err := os.Stat(p.Dir); {
		case errors.Is(err, os.ErrNotExist):
			bad(`parameter "dir": %q does not exist`, p.Dir)
		case err != nil:
			bad(`parameter "dir": %w`, err)
		case !fi.IsDir():
			bad(`parameter "dir": %q is not a directory`, p.Dir)
		}
	}

	env := make([]string, 0, len(p.Env))
	for k, v := range p.Env {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			bad(`parameter "env": bad variable name %q`, k)
			continue
		case strings.IndexByte(v, 0) >= 0:
			bad(`parameter "env": value of %s contains a NUL byte`, k)
			continue
		case slices.Contains(envNames, k):
			bad(`parameter "env": %s is set by slotd`, k)
			continue
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env) // map order is random; keep runs reproducible
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, errors.Join(errs...)
	}

	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &execTask{
		path:      path,
		argv:      p.Command,
		dir:       p.Dir,
		env:       env,
		grace:     p.Grace.Duration,
		maxOutput: p.MaxOutput,
		log:       log,
	}, nil
}

// splitJoined returns the errors that errors.Join joined into err, or err.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ExitError is the error of an exec task whose command did not succeed:
// it exited with a non-zero status, was killed by a signal, or was stopped
// because its context was done. Callers can record Output in history.
type ExitError struct {
	ExitCode int            // exit status; -1 if a signal ended the command
	Signal   syscall.Signal // the signal that ended the command, or 0
	Output   string         // combined stdout and stderr, bounded, valid UTF-8

	// Cause is why slotd stopped the command (context.Cause of the task's
	// context: a timeout, a lost lease, shutdown), or nil if the command
	// ended on its own. errors.Is sees through to it.
	Cause error
}

func (e *ExitError) Error() string {
	var b strings.Builder
	if e.Cause != nil {
		fmt.Fprintf(&b, "stopped (%v): ", e.Cause)
	}
	if e.Signal != 0 {
		fmt.Fprintf(&b, "signal: %v", e.Signal)
	} else {
		fmt.Fprintf(&b, "exit status %d", e.ExitCode)
	}
	if tail := outputTail(e.Output, errTailMax); tail != "" {
		fmt.Fprintf(&b, "; output: %q", tail)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Cause }

// outputTail returns about the last n bytes of s, starting at a rune.
func outputTail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "..." + s
}

// Run runs the command in a process group of its own; on Linux under a
// supervisor (see supervisor.go) that kills every process the command
// started, including those that left its group or session, when the
// command exits, when the attempt is stopped, and when the daemon dies.
// When ctx is done the group gets SIGTERM, and after the grace everything
// is killed. Whatever is left when the command exits is killed too: it
// would otherwise outlive the attempt and its lease, and could overlap the
// next attempt. The tail of the captured output goes to the attempt's
// Output.
func (t *execTask) Run(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("tasks: exec: %s: not started: %w", t.argv[0], context.Cause(ctx))
	}
	start := time.Now()

	// Our own pipe rather than exec's: exec would make Wait wait for every
	// holder of the pipe, including grandchildren that outlive the command.
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("tasks: exec: %w", err)
	}
	defer pr.Close()
	base := (&exec.Cmd{Dir: t.dir}).Environ() // with PWD matching Dir
	startFn := t.start
	if startFn == nil {
		startFn = startProcess
	}
	p, err := startFn(command{path: t.path, argv: t.argv, dir: t.dir, env: t.environ(ctx, base), out: pw})
	pw.Close() // the child has its copy; ours would keep the pipe open
	if err != nil {
		return fmt.Errorf("tasks: exec: start %s: %w", t.argv[0], err)
	}

	out := newCapture(t.maxOutput)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(out, pr) // out never fails; a read error just ends the output
	}()

	exited, stopperDone := make(chan struct{}), make(chan struct{})
	var stopped atomic.Bool
	go func() {
		defer close(stopperDone)
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		stopped.Store(true)
		if errors.Is(context.Cause(ctx), ErrNoGrace) {
			p.kill()
			return
		}
		p.terminate()
		grace := time.NewTimer(t.grace)
		defer grace.Stop()
		select {
		case <-exited:
		case <-grace.C:
			p.kill()
		}
	}()
	ws, waitErr := p.wait()
	close(exited)
	<-stopperDone
	pr.SetReadDeadline(time.Now().Add(outputDrain))
	<-copied
	if waitErr != nil { // no status: not seen on Unix
		return fmt.Errorf("tasks: exec: %s: %w", t.argv[0], waitErr)
	}

	xe := &ExitError{ExitCode: -1, Output: out.String()}
	// The history keeps the tail of the same capture the log gets.
	OutputFrom(ctx).WriteString(xe.Output)
	switch {
	case ws.Exited():
		xe.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		xe.Signal = ws.Signal()
	}
	if stopped.Load() {
		// Even a clean exit on SIGTERM is a failure: the attempt was cut
		// short and must not mark the slot done.
		xe.Cause = context.Cause(ctx)
	}

	attrs := []slog.Attr{
		slog.Int("exit_code", xe.ExitCode),
		slog.Duration("duration", time.Since(start)),
		slog.String("output", xe.Output),
		slog.Int64("output_bytes", out.total),
	}
	if r, ok := RunFrom(ctx); ok {
		attrs = append(attrs, slog.String("slot", r.Slot), slog.Int("attempt", r.Attempt))
	}
	if xe.Signal != 0 {
		attrs = append(attrs, slog.String("signal", xe.Signal.String()))
	}
	if xe.ExitCode == 0 && xe.Cause == nil {
		t.log.LogAttrs(ctx, slog.LevelInfo, "command succeeded", attrs...)
		return nil
	}
	err = fmt.Errorf("tasks: exec: %s: %w", t.argv[0], xe)
	t.log.LogAttrs(ctx, slog.LevelWarn, "command failed", append(attrs, slog.Any("err", err))...)
	return err
}

// environ is base (the daemon's environment, less the variables DropEnv
// names), then the env parameter, then the slot's facts (and an
// on_failure hook's, the failure's); exec keeps the last of duplicate
// names.
func (t *execTask) environ(ctx context.Context, base []string) []string {
	env := append(withoutDropped(base), t.env...)
	r, ok := RunFrom(ctx)
	if !ok {
		return env
	}
	if r.Revision != 0 {
		env = append(env, "SLOTD_STORE_REVISION="+strconv.FormatInt(r.Revision, 10))
	}
	if f, ok := FailureFrom(ctx); ok {
		env = append(env, failureEnv(f)...)
	}
	return append(env,
		"SLOTD_TASK="+r.Task,
		"SLOTD_SLOT="+r.Slot,
		"SLOTD_SLOT_TIME="+r.SlotTime.UTC().Format(time.RFC3339),
		"SLOTD_ATTEMPT="+strconv.Itoa(r.Attempt),
		"SLOTD_FENCING_TOKEN="+strconv.FormatInt(r.Token, 10),
		"SLOTD_REPLICA="+r.Replica,
	)
}

// capture keeps the first and the last bytes written to it, up to a fixed
// total, so that a command writing gigabytes costs a bounded amount of memory.
// It grows as output arrives: most commands write little.
type capture struct {
	head    []byte // the first bytes
	headMax int
	tail    ring  // the last bytes
	total   int64 // bytes written
}

func newCapture(max int) *capture {
	return &capture{headMax: max / 2, tail: ring{max: max - max/2}}
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	k := min(c.headMax-len(c.head), len(p))
	c.head = append(c.head, p[:k]...)
	c.tail.write(p[k:])
	return n, nil
}

// String returns the kept bytes, with a marker where bytes were dropped, as
// valid UTF-8: the output goes into logs, JSON and Redis.
func (c *capture) String() string {
	b := append([]byte(nil), c.head...)
	if omitted := c.total - int64(len(c.head)+len(c.tail.buf)); omitted > 0 {
		b = fmt.Appendf(b, "...[%d bytes omitted]...", omitted)
	}
	return strings.ToValidUTF8(string(c.tail.appendTo(b)), "\uFFFD")
}
