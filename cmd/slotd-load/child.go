package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/cmd/slotd/cli"
	"github.com/slotd/slotd/tasks"
)

// A child is one replica: the real daemon (cli.Main "run") with the probe
// plugin compiled in and a go-redis hook that counts round trips and notes
// when each claim was answered. Both write lines to the records file the
// parent names. The probe's lines are written at once, so that a replica
// killed -9 loses none; the others are buffered and flushed every
// flushEvery and at exit:
//
//	S <task> <slot unix ns> <attempt> <start unix ns>          probe started
//	E <task> <slot unix ns> <attempt> <end unix ns> ok|fail    probe returned
//	X <task> <slot unix ns> <attempt> <start unix ns>          noop ran (and succeeded)
//	C <state key> <answer unix ns>                              claim answered
//	R <unix ns> <round trips> <commands>                        hook counters
//	M <heap in use> <stacks in use> <goroutines>                Go runtime, peak of each since the last M line
const flushEvery = 100 * time.Millisecond

// recorder is the child's records file; the probe and the hook share it.
type recorder struct {
	mu  sync.Mutex
	w   *bufio.Writer
	buf []byte // slot's line, reused
}

var rec *recorder // set by runChild before the daemon loads its config

func (r *recorder) printf(format string, args ...any) {
	r.mu.Lock()
	fmt.Fprintf(r.w, format, args...)
	r.mu.Unlock()
}

// slot writes a slot's line, "<kind> <task> <slot ns> <attempt> <at ns>"
// and " <outcome>" if any, as printf would, without fmt's boxing and
// parsing: a burst writes ten thousand in a second or two, and at printf's
// cost they took 8 % of a replica's CPU, which the burst's figures would
// count as slotd's. With flush, the line and what was buffered before it are written at once.
func (r *recorder) slot(kind byte, task string, slot int64, attempt int, at int64, outcome string, flush bool) {
	r.mu.Lock()
	b := append(r.buf[:0], kind, ' ')
	b = append(b, task...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, slot, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(attempt), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, at, 10)
	if outcome != "" {
		b = append(b, ' ')
		b = append(b, outcome...)
	}
	b = append(b, '\n')
	_, _ = r.w.Write(b)
	r.buf = b
	if flush {
		_ = r.w.Flush()
	}
	r.mu.Unlock()
}

func (r *recorder) flush() {
	r.mu.Lock()
	_ = r.w.Flush()
	r.mu.Unlock()
}

func init() {
	tasks.Register("probe", newProbe)
	tasks.Register("noop", newNoop)
}

// newNoop builds the sustained mode's no-op task: it only records that it
// ran, one buffered line (about a microsecond), so that a replica's CPU
// per slot is the daemon's.
func newNoop(params map[string]any, _ *slog.Logger) (tasks.Task, error) {
	if len(params) > 0 {
		return nil, errors.New("noop: takes no parameters")
	}
	return tasks.TaskFunc(func(ctx context.Context) error {
		start := time.Now().UnixNano()
		run, ok := tasks.RunFrom(ctx)
		if !ok || rec == nil {
			return errors.New("noop: no slot in the context or no records file")
		}
		rec.slot('X', run.Task, run.SlotTime.UnixNano(), run.Attempt, start, "", false)
		return nil
	}), nil
}

// newProbe builds the probe task: it records its start and end, and on its
// first attempt can fail or sleep (until done or for sleep_first).
func newProbe(params map[string]any, _ *slog.Logger) (tasks.Task, error) {
	var p struct {
		FailFirst  bool           `toml:"fail_first"`
		SleepFirst tasks.Duration `toml:"sleep_first"`
	}
	if err := tasks.Decode(params, &p); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	return tasks.TaskFunc(func(ctx context.Context) error {
		start := time.Now()
		run, ok := tasks.RunFrom(ctx)
		if !ok || rec == nil {
			return errors.New("probe: no slot in the context or no records file")
		}
		slot := run.SlotTime.UnixNano()
		// A long task's lines are flushed at once: its replica may be the
		// one killed while it runs. The others wait for the next flush, not
		// to make a burst's ten thousand starts as many writes under one
		// lock, which would cost the replica more than slotd does.
		flush := p.SleepFirst.Duration > 0
		rec.slot('S', run.Task, slot, run.Attempt, start.UnixNano(), "", flush)
		var err error
		if run.Attempt == 1 {
			if p.SleepFirst.Duration > 0 {
				t := time.NewTimer(p.SleepFirst.Duration)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					err = context.Cause(ctx)
				}
			}
			if p.FailFirst && err == nil {
				err = errors.New("probe: first attempt fails by configuration")
			}
		}
		outcome := "ok"
		if err != nil {
			outcome = "fail"
		}
		rec.slot('E', run.Task, slot, run.Attempt, time.Now().UnixNano(), outcome, flush)
		return err
	}), nil
}

// counter is the go-redis hook: every Process is one round trip of one
// command, every ProcessPipeline one round trip of len(cmds) commands. A
// claim is recognised by claim.lua's shape (3 keys, the second ending in
// ":attempts", and 4 arguments per slot); each slot's answer time is
// recorded.
type counter struct {
	trips, cmds atomic.Int64
	claims      bool // record when each claim was answered (C lines)
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.trips.Add(1)
		c.cmds.Add(1)
		if c.claims {
			noteClaim(cmd)
		}
		return err
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		if c.claims {
			for _, cmd := range cmds {
				noteClaim(cmd)
			}
		}
		return err
	}
}

// claimArgs is claim.lua's arguments per slot.
const claimArgs = 4

func noteClaim(cmd redis.Cmder) {
	if cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
		return // NOSCRIPT (go-redis sends EVAL next) or a failure: not answered
	}
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return
	}
	// The batcher fuses concurrent claims into one call: 3 keys and 4
	// arguments per slot, laid end to end (lock/redislock/claim.lua's
	// header). A call of another shape is not a claim; one whose keys look
	// like a claim's but whose arguments do not means the layout changed
	// under this parser, which the report then flags (no claims seen).
	a := cmd.Args()
	if len(a) < 3 {
		return
	}
	nkeys, _ := a[2].(int)
	n := nkeys / 3
	if n == 0 || nkeys != 3*n || len(a) != 3+nkeys+claimArgs*n {
		return
	}
	now := time.Now().UnixNano()
	for i := range n {
		state, _ := a[3+3*i].(string)
		if attempts, _ := a[4+3*i].(string); !strings.HasSuffix(attempts, ":attempts") || state == "" {
			return
		}
		rec.printf("C %s %d\n", state, now)
	}
}

// runChild runs one replica until SIGTERM; it returns the exit code.
// Without noteClaims it writes no C lines (the sustained mode, whose CPU
// per slot they would inflate, reads none).
func runChild(config, records string, profile, noteClaims bool, stderr io.Writer) int {
	f, err := os.OpenFile(records, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(stderr, "load child: %v\n", err)
		return 1
	}
	defer f.Close()
	rec = &recorder{w: bufio.NewWriterSize(f, 1<<16)}
	hook := &counter{claims: noteClaims}
	peaks := &runtimePeaks{}
	// Every 100 ms: at 10 ms the sampler's own wake-ups cost each replica
	// about 9 ms of CPU a second (-rate 10: 12 against 3 ms/s), which a
	// sweep counted as slotd's cost of each added replica (4.5 µs a slot
	// at 2,000/s). The peaks it misses are between samples; RSS is VmHWM.
	stopPeaks := peaks.sample(100 * time.Millisecond)
	defer stopPeaks()

	// One goroutine flushes the records and the counters; it is stopped
	// and waited for before the final flush.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rec.printf("R %d %d %d\n", time.Now().UnixNano(), hook.trips.Load(), hook.cmds.Load())
				heap, stacks, gs := peaks.take()
				rec.printf("M %d %d %d\n", heap, stacks, gs)
				rec.flush()
			}
		}
	}()
	if profile {
		base := strings.TrimSuffix(records, ".records")
		stop, err := startProfiles(base)
		if err != nil {
			fmt.Fprintf(stderr, "load child: %v\n", err)
			return 1
		}
		defer stop()
	}
	code := cli.Main(context.Background(), []string{"run", "-config", config}, os.Stdout, stderr, cli.WithRedisHook(hook))
	close(stop)
	wg.Wait()
	rec.printf("R %d %d %d\n", time.Now().UnixNano(), hook.trips.Load(), hook.cmds.Load())
	rec.flush()
	return code
}

// startProfiles starts a CPU profile into base.cpu.pprof; the function it
// returns stops it and writes the heap profile into base.heap.pprof.
func startProfiles(base string) (func(), error) {
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	// SIGUSR1 writes base.live.heap.pprof after a collection: the heap
	// at exit is the shutdown's, and what a replica keeps alive under
	// load is what its RSS follows (the heap goal is twice it).
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			runtime.GC()
			if heap, err := os.Create(base + ".live.heap.pprof"); err == nil {
				_ = pprof.WriteHeapProfile(heap)
				heap.Close()
			}
		}
	}()
	return func() {
		signal.Stop(usr1)
		pprof.StopCPUProfile()
		cpu.Close()
		if heap, err := os.Create(base + ".heap.pprof"); err == nil {
			_ = pprof.WriteHeapProfile(heap)
			heap.Close()
		}
	}, nil
}

// runtimePeaks samples what the RSS is made of: the Go heap in use, the
// goroutine stacks in use and the number of goroutines, keeping the peak
// of each between takes. runtime/metrics reads them without stopping the
// world.
type runtimePeaks struct {
	mu                sync.Mutex
	heap, stacks, gos uint64
}

var peakMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/stacks:bytes", "/sched/goroutines:goroutines"}

// sample reads the metrics every d until the returned function is called.
func (p *runtimePeaks) sample(d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := make([]metrics.Sample, len(peakMetrics))
		for i, name := range peakMetrics {
			s[i].Name = name
		}
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			metrics.Read(s)
			p.mu.Lock()
			p.heap = max(p.heap, s[0].Value.Uint64())
			p.stacks = max(p.stacks, s[1].Value.Uint64())
			p.gos = max(p.gos, s[2].Value.Uint64())
			p.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// take returns the peaks since the last take and starts over.
func (p *runtimePeaks) take() (heap, stacks, gos uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	heap, stacks, gos = p.heap, p.stacks, p.gos
	p.heap, p.stacks, p.gos = 0, 0, 0
	return heap, stacks, gos
}
