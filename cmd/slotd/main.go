// Command slotd is the distributed scheduled-task runner daemon. See the
// README for the quick start and cli for the commands. On Linux the binary
// is also the supervisor of each exec task attempt, re-executed as
// `slotd __supervise ...`; package tasks dispatches that before main runs.
package main

import (
	"context"
	"os"

	"github.com/slotd/slotd/cmd/slotd/cli"
)

func main() { os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
