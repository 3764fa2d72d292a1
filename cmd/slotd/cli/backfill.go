package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/slotd/slotd/internal/observe"
)

// cmdBackfill is `slotd backfill TASK FROM TO`: run every scheduled slot
// of TASK in [FROM, TO) once, oldest first. It asks the running daemon at
// the config's [http] listen address, as trigger does: the daemon that
// takes the request runs the slots through the normal claim, so a slot
// already done is not run again, and the limits (slots per request, slots
// at once, backfills at once) are the daemon's.
func cmdBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, pos, ok := parseCommand("backfill", args, stderr, []string{"TASK", "FROM", "TO"}, nil)
	if !ok {
		return exitUsage
	}
	var at [2]time.Time
	for i, name := range []string{"FROM", "TO"} {
		t, err := parseBackfillTime(pos[1+i])
		if err != nil {
			fmt.Fprintf(stderr, "slotd backfill: %s %q: %v\n", name, pos[1+i], err)
			return exitUsage
		}
		at[i] = t
	}
	if !at[0].Before(at[1]) {
		fmt.Fprintf(stderr, "slotd backfill: FROM %s is not before TO %s\n", at[0].Format(time.RFC3339), at[1].Format(time.RFC3339))
		return exitUsage
	}
	d, ok := loadReadOnly(path, discard, stderr)
	if !ok {
		return exitUsage
	}
	task, err := findTask(d, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "slotd backfill: %v\n", err)
		return exitUsage
	}
	q := url.Values{"from": {at[0].Format(time.RFC3339)}, "to": {at[1].Format(time.RFC3339)}}
	body, code := callAPI(ctx, "backfill", d.Config, "/api/v1/tasks/"+url.PathEscape(task.Name)+"/backfill?"+q.Encode(), stderr)
	if code != exitOK {
		return code
	}
	var rep observe.BackfillReply
	if err := json.Unmarshal(body, &rep); err != nil {
		fmt.Fprintf(stderr, "slotd backfill: the daemon's answer: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "backfilling %s: %d slots, %s to %s, oldest first, at most %d at once; slots already done are not run again\n",
		rep.Task, rep.Slots, rep.First, rep.Last, rep.InFlight)
	return exitOK
}

// parseBackfillTime reads FROM or TO: RFC 3339, or a date (midnight UTC).
func parseBackfillTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time (2024-01-15T14:00:00Z) or a date (2024-01-15, midnight UTC)")
}
