// Command slotd-custom is slotd with a custom plugin compiled in: the
// example greet plugin. Copy it, and replace the blank import with your own
// plugins' packages; see package greet for how to write one. Like slotd,
// the binary supervises its own exec task attempts (package tasks answers
// the hidden __supervise subcommand before main): nothing to add for that.
package main

import (
	"context"
	"os"

	"github.com/slotd/slotd/cmd/slotd/cli"
	_ "github.com/slotd/slotd/tasks/example/greet"
)

func main() { os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
