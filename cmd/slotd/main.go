// Command slotd is the distributed scheduled-task runner daemon. See the
// README for the quick start and cli for the commands.
package main

import (
	"context"
	"os"

	"github.com/slotd/slotd/cmd/slotd/cli"
)

func main() { os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
