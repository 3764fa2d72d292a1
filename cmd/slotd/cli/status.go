package cli

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/assemble"
	"github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/store"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
)

// The operator commands — status, history, rerun — read (and, for rerun,
// write) the fleet's shared state in Redis directly: they work whether or
// not a daemon runs, from any machine that can reach Redis.

const (
	defaultHistoryLength = 20
	commandTimeout       = 15 * time.Second // for a whole command's Redis calls
)

// parseCommand parses `-config FILE`, extra's flags and exactly len(names)
// positional arguments, flags and arguments in any order.
func parseCommand(name string, args []string, stderr io.Writer, names []string, extra func(*flag.FlagSet)) (string, []string, bool) {
	fs := flag.NewFlagSet("slotd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "config.toml", "configuration file")
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: slotd %s [flags]", name)
		for _, n := range names {
			fmt.Fprintf(stderr, " %s", n)
		}
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return "", nil, false
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case len(pos) == len(names):
		return *path, pos, true
	case len(names) == 0:
		fmt.Fprintf(stderr, "slotd %s: unexpected argument %q\n", name, pos[0])
	default:
		fmt.Fprintf(stderr, "slotd %s: want %d arguments (%s), got %d\n", name, len(names), strings.Join(names, " "), len(pos))
	}
	fs.Usage()
	return "", nil, false
}

// openShared loads the configuration at path and connects to its Redis.
// It prints why not and returns the exit code if it cannot.
func openShared(ctx context.Context, name, path string, stderr io.Writer) (*assemble.Daemon, *store.Backend, int) {
	d, ok := loadReadOnly(path, discard, stderr)
	if !ok {
		return nil, nil, exitUsage
	}
	cfg := d.Config
	if cfg.Embedded() {
		where := ""
		if cfg.Listen != "off" {
			where = fmt.Sprintf("; a running daemon shows its own on http://%s/", cfg.Listen)
		}
		fmt.Fprintf(stderr, "slotd %s: %s has no [redis] url, addrs or redlock: the daemon uses the embedded in-memory store, "+
			"which lives inside the daemon process, so there is no shared state to read%s\n", name, path, where)
		return nil, nil, exitError
	}
	quietRedis()
	b, err := store.Open(ctx, cfg, discard, store.WithMaxRetries(1))
	if err != nil { // validated at load; this is not expected
		fmt.Fprintf(stderr, "slotd: %s: %v\n", path, err)
		return nil, nil, exitUsage
	}
	return d, b, exitOK
}

// quietRedis drops go-redis's own messages for a command: it logs each
// failed dial on its own, unformatted ("redis: 2026/01/02 pool.go:770:
// ..."), and the command's error already names each node it could not
// reach. Only run keeps them, in its own log (cmdRun).
func quietRedis() { redis.SetLogger(redisLogger{discard}) }

func findTask(d *assemble.Daemon, name string) (*scheduler.Task, error) {
	names := make([]string, 0, len(d.Tasks))
	for i := range d.Tasks {
		if d.Tasks[i].Name == name {
			return &d.Tasks[i], nil
		}
		names = append(names, d.Tasks[i].Name)
	}
	return nil, fmt.Errorf("no task %q in %s (tasks: %s)", name, d.Config.Source, strings.Join(names, ", "))
}

// cmdStatus is `slotd status`: the fleet's recent slots per task.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	n := observe.DefaultSlots
	path, _, ok := parseCommand("status", args, stderr, nil, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "write JSON")
		fs.IntVar(&n, "n", n, "slots per task, newest first")
	})
	if !ok || n < 1 {
		if ok {
			fmt.Fprintln(stderr, "slotd status: -n must be at least 1")
		}
		return exitUsage
	}
	d, b, code := openShared(ctx, "status", path, stderr)
	if d == nil {
		return code
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	rep, err := observe.Report(ctx, d.Tasks, b.Store, b.History, n)
	if err != nil {
		fmt.Fprintf(stderr, "slotd status: %v\n", err)
		return exitError
	}
	if asJSON {
		err = observe.WriteJSON(stdout, rep)
	} else {
		err = writeStatus(stdout, rep, clockName(d.Config))
	}
	if err != nil {
		fmt.Fprintf(stderr, "slotd status: %v\n", err)
		return exitError
	}
	// A task that could not be read in full shows why in its own place;
	// the others are whole, so the command succeeded.
	for _, t := range rep.Tasks {
		if t.ReadError != "" {
			fmt.Fprintf(stderr, "slotd status: task %s not read in full: %s\n", clean(t.Name), clean(t.ReadError))
		}
	}
	return exitOK
}

// clockName names the store whose clock a report's time is read from.
func clockName(cfg *config.Config) string {
	switch {
	case cfg.UsesEtcd():
		return "etcd"
	case cfg.UsesZooKeeper():
		return "ZooKeeper"
	case cfg.Embedded():
		return "embedded store"
	}
	return "Redis"
}

// writeStatus writes rep as a table per task; its time is by the clock
// of the store named clock.
func writeStatus(w io.Writer, rep observe.StatusReport, clock string) error {
	fmt.Fprintf(w, "as of %s UTC (%s clock)\n", stamp(rep.Now), clock)
	for _, t := range rep.Tasks {
		next := "none"
		if !t.Next.IsZero() {
			next = fmt.Sprintf("%s (in %s)", stamp(t.Next), t.Next.Sub(rep.Now).Round(time.Second))
		}
		paused := ""
		if t.Paused {
			paused = "  PAUSED (slotd resume to fire its slots again)"
		}
		fmt.Fprintf(w, "\n%s  %q %s, %s, up to %d attempts; next %s%s\n",
			clean(t.Name), t.Schedule, t.Timezone, t.Plugin, t.MaxAttempts, next, paused)
		if t.ReadError != "" {
			fmt.Fprintf(w, "  NOT READ IN FULL: %s\n", clean(t.ReadError))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tTIME (UTC)\tPHASE\tATTEMPTS\tREPLICA\tSTARTED\tDURATION\tOUTCOME\tERROR")
		for _, s := range t.Slots {
			replica := s.Replica
			var started, took, outcome, errText string
			if l := s.Last; l != nil {
				if replica == "" {
					replica = l.Replica
				}
				started, took = stamp(l.Started), l.Duration.Round(time.Millisecond).String()
				outcome = string(l.Outcome) + " #" + strconv.Itoa(l.Attempt)
				errText = l.Error
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", s.ID, stamp(s.Time), s.Phase,
				s.Attempts, t.MaxAttempts, clean(replica), started, took, clean(outcome), shorten(clean(errText), 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// cmdHistory is `slotd history TASK`: the task's latest attempts.
func cmdHistory(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var asJSON, output bool
	n := defaultHistoryLength
	path, pos, ok := parseCommand("history", args, stderr, []string{"TASK"}, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "write JSON (with each attempt's output)")
		fs.BoolVar(&output, "output", false, "write each attempt's output (its kept tail) below the table")
		fs.IntVar(&n, "n", n, "how many attempts, newest first")
	})
	if !ok || n < 1 {
		if ok {
			fmt.Fprintln(stderr, "slotd history: -n must be at least 1")
		}
		return exitUsage
	}
	d, b, code := openShared(ctx, "history", path, stderr)
	if d == nil {
		return code
	}
	defer b.Close()
	task, err := findTask(d, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "slotd history: %v\n", err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	entries, err := b.History.Recent(ctx, task.Name, n)
	if err != nil {
		fmt.Fprintf(stderr, "slotd history: %v\n", err)
		return exitError
	}
	if asJSON {
		err = observe.WriteJSON(stdout, struct {
			Task    string                   `json:"task"`
			Entries []scheduler.HistoryEntry `json:"entries"`
		}{task.Name, entries})
	} else {
		err = writeHistory(stdout, task.Name, entries, output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "slotd history: %v\n", err)
		return exitError
	}
	return exitOK
}

// writeHistory writes entries as a table, with the last line of each
// attempt's output; output adds each attempt's whole kept output below it.
// Output is the task's own text: control characters are escaped (newlines
// and tabs kept), so that it cannot drive the terminal.
func writeHistory(w io.Writer, task string, entries []scheduler.HistoryEntry, output bool) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintf(w, "%s: no attempts recorded\n", task)
		return err
	}
	fmt.Fprintf(w, "%s: latest %d attempts, newest first\n", task, len(entries))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED (UTC)\tSLOT\tATTEMPT\tREPLICA\tOUTCOME\tDURATION\tTOKEN\tERROR\tOUTPUT (LAST LINE)")
	for _, e := range entries {
		slot := clean(e.Slot)
		if e.Backfilled {
			slot += " (backfilled)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", stamp(e.Started), slot, e.Attempt,
			clean(e.Replica), clean(string(e.Outcome)), e.Duration.Round(time.Millisecond), e.Token, shorten(clean(e.Error), 100),
			shorten(clean(lastLine(e.Output)), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !output {
		return nil
	}
	for _, e := range entries {
		if e.Output == "" {
			continue
		}
		text := escapeControls(e.Output, true)
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		if _, err := fmt.Fprintf(w, "\n--- output of slot %s attempt %d (%s, %s, started %s UTC):\n%s", clean(e.Slot), e.Attempt,
			clean(e.Replica), clean(string(e.Outcome)), stamp(e.Started), text); err != nil {
			return err
		}
	}
	return nil
}

// lastLine is the last line of s that is not blank.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\r\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// cmdRerun is `slotd rerun TASK SLOT`: clear a slot's done marker and
// attempts so that it may run again within its window.
func cmdRerun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var force bool
	path, pos, ok := parseCommand("rerun", args, stderr, []string{"TASK", "SLOT"}, func(fs *flag.FlagSet) {
		fs.BoolVar(&force, "force", false, "clear the slot even while an attempt runs (its holder then loses its lease and cancels the task)")
	})
	if !ok {
		return exitUsage
	}
	d, b, code := openShared(ctx, "rerun", path, stderr)
	if d == nil {
		return code
	}
	defer b.Close()
	task, err := findTask(d, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "slotd rerun: %v\n", err)
		return exitUsage
	}
	slot, err := task.ParseSlot(pos[1])
	if err != nil {
		fmt.Fprintf(stderr, "slotd rerun: %v\n", err)
		return exitUsage
	}
	log := newLogger(stderr, d.Config.LogLevel, d.Config.LogFormat).With("task", task.Name, "slot", slot.ID)
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()

	now, err := b.Store.Time(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "slotd rerun: %v\n", err)
		return exitError
	}
	switch {
	case now.Before(slot.Time):
		fmt.Fprintf(stderr, "slotd rerun: slot %s of %s fires at %s UTC, in %s: nothing to rerun yet\n",
			slot.ID, task.Name, stamp(slot.Time), slot.Time.Sub(now).Round(time.Second))
		return exitError
	case !now.Before(slot.Deadline):
		fmt.Fprintf(stderr, "slotd rerun: the window of slot %s of %s closed at %s UTC: no replica would claim it again; left as it is\n",
			slot.ID, task.Name, stamp(slot.Deadline))
		return exitError
	}

	res, err := b.Store.Rerun(ctx, slot, force)
	if err != nil {
		fmt.Fprintf(stderr, "slotd rerun: %v\n", err)
		return exitError
	}
	switch res.Refused {
	case "running":
		fmt.Fprintf(stderr, "slotd rerun: slot %s of %s is running (%s, lease %s left); refusing. "+
			"-force clears it anyway: the holder then fails to renew its lease and cancels the task, "+
			"and a new attempt may start before it has stopped.\n",
			slot.ID, task.Name, clean(res.Previous), res.TTL)
		return exitError
	case "foreign":
		state, _ := redislock.Keys(d.Config.Prefix, slot)
		fmt.Fprintf(stderr, "slotd rerun: slot key %s holds a value slotd did not write (%q); refusing. -force deletes it.\n",
			state, shorten(res.Previous, 80))
		return exitError
	}
	if res.Previous == "" && res.Attempts == 0 {
		// Nothing was done: no state to clear, and no replica told to
		// look again unless one is waiting on the slot.
		running := "no replica is subscribed to the store (is any daemon running with this configuration?)"
		if res.Woken > 0 {
			running = fmt.Sprintf("%d subscribed replica(s) were told to look at it again", res.Woken)
		}
		fmt.Fprintf(stderr, "slotd rerun: nothing to rerun: slot %s of %s has no state and no attempts (it was never claimed, or its keys expired); %s. "+
			"A replica claims a free slot by itself while its window is open (until %s UTC).\n",
			slot.ID, task.Name, running, stamp(slot.Deadline))
		return exitError
	}
	fmt.Fprintf(stdout, "cleared slot %s of %s: state %q; %d attempts so far, %d more allowed (attempt numbers and fencing tokens keep growing)\n",
		slot.ID, task.Name, clean(res.Previous), res.Attempts, task.MaxAttempts)
	if res.Woken == 0 {
		fmt.Fprintf(stdout, "no replica is subscribed to the store (is any daemon running?): the slot runs only if one starts before its window closes at %s UTC (%s from now) and catches it up\n",
			stamp(slot.Deadline), slot.Deadline.Sub(now).Round(time.Second))
	} else {
		fmt.Fprintf(stdout, "woke %d subscribed replica(s); the window is open until %s UTC (%s from now)\n",
			res.Woken, stamp(slot.Deadline), slot.Deadline.Sub(now).Round(time.Second))
	}
	log.Info("slot cleared for a rerun", "previous_state", res.Previous, "attempts", res.Attempts,
		"forced", force, "subscribers", res.Woken, "deadline", slot.Deadline)
	return exitOK
}

// stamp is a time as the tables show it, in UTC.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.DateTime)
}

// clean makes s one line of printable text: values read from Redis and
// task output must not move a terminal's cursor or forge table rows.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsGraphic(r) { // controls, and format characters such as bidi overrides
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	return strings.Join(strings.Fields(s), " ")
}

// shorten cuts s to at most n runes, marking a cut with "…".
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
