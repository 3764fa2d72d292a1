// Package greet is an example slotd plugin, and this comment is the guide
// to writing one.
//
// # A plugin is a package
//
// A plugin is an ordinary Go package that registers a factory under a name
// in its init function:
//
//	import "github.com/slotd/slotd/tasks"
//
//	func init() { tasks.Register("greet", newGreet) }
//
// Register panics on a duplicate name, so two plugins that claim one name
// fail the binary at start-up, not at the first fire time.
//
// # Compiling it in
//
// slotd has no dynamic loading: a plugin is compiled into a binary of your
// own, whose main is slotd's main plus a blank import of each plugin. This
// repository's cmd/slotd-custom is that binary for this package:
//
//	package main
//
//	import (
//		"context"
//		"os"
//
//		"github.com/slotd/slotd/cmd/slotd/cli"
//		_ "github.com/slotd/slotd/tasks/example/greet"
//	)
//
//	func main() { os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
//
// Build it with go build ./cmd/slotd-custom, then name the plugin in a task:
//
//	[[task]]
//	name = "hello"
//	schedule = "@every 1m"
//	plugin = "greet"
//	  [task.params]
//	  greeting = "good morning"
//
// # The factory
//
// A tasks.Factory gets the task's [task.params] table and a logger already
// scoped to the task. slotd calls it while it validates the configuration,
// also in "slotd validate", so it must check everything it can and start
// nothing: no goroutines, no connections, no files. Decode the table with
// tasks.Decode, which rejects unknown keys and wrong types with an error
// naming the parameter; set defaults in the struct before decoding, and
// check values (a duration that must be positive, a count that must not be
// negative) after. Use tasks.Duration for durations.
//
// # Run
//
// The task's Run gets a context carrying the attempt: tasks.RunFrom(ctx)
// gives the task name, the slot id and time, the 1-based attempt number, the
// fencing token and the replica. Use the slot time, never time.Now, as the
// time the work is for, and pass the fencing token to any store that can
// reject a stale writer. Run must return soon after ctx is done;
// context.Cause(ctx) says why (a timeout, a lost lease, shutdown). A nil
// error marks the slot done; any error lets a peer retry it, up to the
// task's max_attempts.
//
// # Output
//
// What an attempt printed or returned is kept with it in the run history
// and shown by slotd history, the status API and page. Write it to
// tasks.OutputFrom(ctx), a writer that keeps a bounded tail (the task's
// output_tail, 4 KiB by default), never fails, and discards everything
// when no output is kept:
//
//	fmt.Fprintf(tasks.OutputFrom(ctx), "%s (slot %s)\n", greeting, r.Slot)
//
// Write only what the task produced: the output is shown to whoever reads
// the status page, so never a credential or the daemon's environment.
//
// # This plugin
//
// greet logs its greeting with the slot id and fencing token. Its
// parameters:
//
//	greeting = "hello"   # what to say
//	fail_attempts = 0    # fail this many first attempts of each slot
//
// fail_attempts makes retries visible: with fail_attempts = 1, the first
// attempt of every slot fails and a replica's retry succeeds.
package greet
