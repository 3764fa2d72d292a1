package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"
	"unicode/utf8"
)

// Scenario 13. DST, from the outside: `slotd validate -n 400` on a task at
// 02:30 Europe/Berlin lists more than a year of fire times from now, which
// always spans one spring-forward and one fall-back day.
//
// The policy observed (classic cron, documented on scheduler.Schedule, for
// specs whose hour field is not "*"): a wall time skipped by the change
// fires once at the first instant after the gap — one run at 03:00 CEST on
// the spring-forward day; a wall time repeated by it fires once, at its
// first occurrence — one run at 02:30 CEST on the fall-back day, the next
// day's 02:30 CET closing its window. Every slot has its own id (hour
// resolution).
func TestDSTSkippedAndRepeatedWallTimes(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("Europe/Berlin: %v", err) // time/tzdata is linked in
	}
	path := filepath.Join(t.TempDir(), "dst.toml")
	if err := os.WriteFile(path, []byte(vconfig("", "", vtask("berlin", "30 2 * * *", `timezone = "Europe/Berlin"`))), 0o644); err != nil {
		t.Fatal(err)
	}
	r := slotd(t, "validate", "-n", "400", "-config", path)
	if r.code != 0 {
		t.Fatalf("validate: exit %d:\n%s", r.code, r.stderr)
	}
	type fire struct {
		at, deadline time.Time
		slot         string
	}
	var fires []fire
	for line := range strings.Lines(r.stdout) {
		f := strings.Fields(line)
		if len(f) != 5 || f[1] != "slot" || f[3] != "deadline" {
			continue
		}
		at, err1 := time.Parse(time.RFC3339, f[0])
		dl, err2 := time.Parse(time.RFC3339, f[4])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad line %q", line)
		}
		fires = append(fires, fire{at, dl, f[2]})
	}
	if len(fires) != 400 {
		t.Fatalf("%d fire times listed, want 400:\n%s", len(fires), r.stdout)
	}
	perDay := map[string][]fire{}
	ids := map[string]bool{}
	for i, f := range fires {
		local := f.at.In(berlin)
		shifted := local.Hour() == 3 && local.Minute() == 0 && local.Add(-time.Minute).Hour() == 1 // 03:00 just after the gap
		if (local.Hour() != 2 || local.Minute() != 30) && !shifted {
			t.Errorf("fire %s is %s in Berlin, not 02:30 (nor 03:00 after a skipped 02:30)", f.at, local.Format("15:04 MST"))
		}
		if i > 0 && !f.at.After(fires[i-1].at) {
			t.Errorf("fire %s listed after %s", f.at, fires[i-1].at)
		}
		if ids[f.slot] {
			t.Errorf("slot id %s repeated", f.slot)
		}
		ids[f.slot] = true
		if i+1 < len(fires) && !f.deadline.Equal(fires[i+1].at) {
			t.Errorf("fire %s: deadline %s, want the next fire %s", f.at, f.deadline, fires[i+1].at)
		}
		day := local.Format("2006-01-02")
		perDay[day] = append(perDay[day], f)
	}

	first, last := fires[0].at.In(berlin), fires[len(fires)-1].at.In(berlin)
	springs, falls := 0, 0
	for d := time.Date(first.Year(), first.Month(), first.Day()+1, 12, 0, 0, 0, berlin); d.Before(last); d = d.AddDate(0, 0, 1) {
		day := d.Format("2006-01-02")
		// 02:30 on day: skipped if Go normalises it to another hour,
		// repeated if 02:30 plus an hour still reads 02:30.
		wall := time.Date(d.Year(), d.Month(), d.Day(), 2, 30, 0, 0, berlin)
		got := perDay[day]
		switch {
		case wall.Hour() != 2:
			springs++
			t.Logf("spring forward %s: %d fires; the day before's window ends %s", day, len(got), perDay[d.AddDate(0, 0, -1).Format("2006-01-02")][0].deadline.In(berlin).Format("2006-01-02 15:04 MST"))
			gapEnd := time.Date(d.Year(), d.Month(), d.Day(), 3, 0, 0, 0, berlin)
			if len(got) != 1 || !got[0].at.Equal(gapEnd) {
				t.Errorf("spring-forward day %s: fires %v, want one, at 03:00 %s (02:30 does not exist)", day, got, gapEnd.Format("MST"))
			}
		case wall.Add(time.Hour).In(berlin).Hour() == 2 || wall.Add(-time.Hour).In(berlin).Hour() == 2:
			falls++
			for _, f := range got {
				t.Logf("fall back %s: fire %s (%s) slot %s deadline %s", day, f.at.Format(time.RFC3339),
					f.at.In(berlin).Format("15:04 MST"), f.slot, f.deadline.Format(time.RFC3339))
			}
			if len(got) != 1 {
				t.Errorf("fall-back day %s: %d fires, want 1 (02:30 CEST, not 02:30 CET)", day, len(got))
			} else if _, off := got[0].at.In(berlin).Zone(); off != 2*3600 {
				t.Errorf("fall-back day %s: fire %s, want the first 02:30 (CEST)", day, got[0].at.In(berlin).Format("15:04 MST"))
			}
		default:
			if len(got) != 1 {
				t.Errorf("%s: %d fires, want 1", day, len(got))
			}
		}
	}
	if springs == 0 || falls == 0 {
		t.Errorf("%d spring-forward and %d fall-back days within the listed fires, want one of each", springs, falls)
	}
}

// Scenario 14a. An exec task whose output is hostile and huge — 50 MB of
// random bytes (NULs, invalid UTF-8, escape sequences) on stdout, 1 MB on
// stderr, and a forged JSON log line — succeeds, the daemon keeps running
// (slots keep coming), and its log stays one valid JSON object per line,
// holding a bounded excerpt of the output.
func TestHostileHugeOutput(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start(1, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("noisy", "@every 2s", `rec start
head -c 50000000 /dev/urandom
head -c 1000000 /dev/urandom >&2
printf '\000\377\376\033[31m\n{"time":"x","level":"ERROR","msg":"forged"}\n'
rec end`, ""))
	c.ledger.await("3 noisy slots to end", 30*time.Second, func(evs []event) bool { return slotsWith(evs, "end", 1) >= 3 })
	r := c.reps[0]
	// The daemon logs the command's end just after the task's last line.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(poll) {
		n := 0
		for _, rec := range r.records() {
			if rec.msg() == "command succeeded" && rec.str("task") == "noisy" {
				n++
			}
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d \"command succeeded\" lines for 3 ended runs", n)
		}
	}
	if !r.running() {
		t.Fatal("the replica exited")
	}
	hwm := peakRSS(r.pid())
	log := r.log()
	lines, succeeded, longest, excerpt := 0, 0, 0, 0
	for line := range strings.Lines(log) {
		lines++
		if !utf8.ValidString(line) {
			t.Errorf("log line %d is not valid UTF-8: %.200q", lines, line)
			continue
		}
		var rec logRec
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line %d is not a JSON object: %v: %.200q", lines, err, line)
			continue
		}
		if rec.msg() == "forged" {
			t.Errorf("log line %d is the task's forged line", lines)
		}
		if rec.msg() == "command succeeded" && rec.str("task") == "noisy" {
			succeeded++
			if n := rec.num("output_bytes"); n < 51_000_000 {
				t.Errorf("output_bytes %v, want >= 51000000", n)
			}
			// max_output (64 KiB) bounds the bytes kept; made valid UTF-8,
			// each invalid byte becomes U+FFFD, 3 bytes.
			out := rec.str("output")
			if len(out) > 3*(64<<10)+200 {
				t.Errorf("%d bytes of output in one log line, want at most 3 x 64 KiB", len(out))
			}
			longest = max(longest, len(line))
			excerpt = max(excerpt, len(out))
		}
	}
	if succeeded < 3 {
		t.Errorf("%d \"command succeeded\" lines for noisy, want >= 3", succeeded)
	}
	t.Logf("%d log lines, %d bytes; output excerpt %d bytes (UTF-8), longest line %d bytes; replica peak RSS %s",
		lines, len(log), excerpt, longest, hwm)
}

// peakRSS is VmHWM of pid, as /proc reports it ("" if unknown).
func peakRSS(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Scenario 14b. Task names and plugin parameters with odd characters are
// refused at load with exit status 2 and a message that names the task (its
// name quoted, so a control character cannot forge the message) and the
// key.
func TestValidateOddNamesAndParams(t *testing.T) {
	t.Parallel()
	execTask := func(name, params string) string {
		return `[[task]]
name = ` + q(name) + `
schedule = "@hourly"
plugin = "exec"
  [task.params]
` + params
	}
	cases := []struct {
		name, config string
		want         []string
	}{
		{"colon", execTask("a:b", `  command = ["/bin/true"]`), []string{strconv.Quote("a:b"), "name"}},
		{"closing brace", execTask("a}b", `  command = ["/bin/true"]`), []string{strconv.Quote("a}b"), "name"}},
		{"newline", execTask("a\nb", `  command = ["/bin/true"]`), []string{strconv.Quote("a\nb"), "name"}},
		{"escape sequence", execTask("a\x1b[31mb", `  command = ["/bin/true"]`), []string{strconv.Quote("a\x1b[31mb"), "name"}},
		{"NUL", execTask("a\x00b", `  command = ["/bin/true"]`), []string{strconv.Quote("a\x00b"), "name"}},
		{"non-ASCII", execTask("répört", `  command = ["/bin/true"]`), []string{strconv.Quote("répört"), "name"}},
		{"glob", execTask("a*", `  command = ["/bin/true"]`), []string{strconv.Quote("a*"), "name"}},
		{"leading dot", execTask(".hidden", `  command = ["/bin/true"]`), []string{strconv.Quote(".hidden"), "name"}},
		{"empty", execTask("", `  command = ["/bin/true"]`), []string{"name"}},
		{"129 bytes", execTask(strings.Repeat("a", 129), `  command = ["/bin/true"]`), []string{"name", strings.Repeat("a", 129)}},
		{"NUL in an argument", execTask("p", `  command = ["/bin/true", "a\u0000b"]`), []string{`"p"`, "command", "NUL"}},
		{"NUL in an env value", execTask("p", "  command = [\"/bin/true\"]\n  [task.params.env]\n  X = \"a\\u0000b\""), []string{`"p"`, "env"}},
		{"= in an env name", execTask("p", "  command = [\"/bin/true\"]\n  [task.params.env]\n  \"A=B\" = \"x\""), []string{`"p"`, "env", "A=B"}},
		{"env overriding SLOTD_TOKEN", execTask("p", "  command = [\"/bin/true\"]\n  [task.params.env]\n  SLOTD_FENCING_TOKEN = \"9999999999999\""), []string{`"p"`, "SLOTD_FENCING_TOKEN"}},
		{"empty program", execTask("p", `  command = [""]`), []string{`"p"`, "command"}},
		{"unknown param", execTask("p", "  command = [\"/bin/true\"]\n  comand = [\"x\"]"), []string{`"p"`, "comand"}},
		{"negative max_output", execTask("p", "  command = [\"/bin/true\"]\n  max_output = -1"), []string{`"p"`, "max_output"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := validate(t, vconfig("", "", tc.config))
			if r.code != 2 {
				t.Errorf("exit status %d, want 2; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, r.stderr)
				}
			}
			if strings.Count(strings.TrimSpace(r.stderr), "\n") > 5 {
				t.Errorf("stderr is long for one bad key:\n%s", r.stderr)
			}
		})
	}
}

// Scenario 14c. A Redis holding values slotd did not write: "garbage" in
// one task's state key, and in another's attempts counter, set before their
// slot. Neither slot runs; both keys are left exactly as they were (value
// and TTL); each replica logs a warning naming the slot and the foreign
// value, and the slot as missed when its window closes; meanwhile another
// task keeps running.
func TestForeignValueInSlotKeys(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	spec, at := oneShot(4 * time.Second)
	c.start(2, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.execTask("victim", spec, `rec start; rec end`, `deadline = "4s"`),
		c.execTask("victim2", spec, `rec start; rec end`, `deadline = "4s"`),
		c.execTask("bystander", "@every 1s", `rec start; rec end`, ""))
	slot := at.Format("20060102")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	foreign := map[string]string{
		stateKey("victim", slot):     "garbage",
		attemptsKey("victim2", slot): "garbage\x00\xff",
	}
	for k, v := range foreign {
		if err := c.rdb.Set(ctx, k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	end := at.Add(4 * time.Second)
	c.ledger.await("a bystander run after the victims' windows closed", 20*time.Second, func(evs []event) bool {
		for _, e := range find(byTask(evs, "bystander"), "end", 0) {
			if e.At.After(end.Add(time.Second)) {
				return true
			}
		}
		return false
	})
	evs := c.ledger.read()
	if n := len(byTask(evs, "victim")) + len(byTask(evs, "victim2")); n != 0 {
		t.Errorf("a slot with a foreign key ran:\n%s", dump(append(byTask(evs, "victim"), byTask(evs, "victim2")...)))
	}
	for k, v := range foreign {
		got, ok := c.get(k)
		ttl := c.pttl(k)
		if !ok || got != v || ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("foreign key %s: %q with PTTL %v, want %q untouched, PTTL about 1h", k, got, ttl, v)
		}
	}
	for _, k := range []string{attemptsKey("victim", slot), stateKey("victim2", slot)} {
		if v, ok := c.get(k); ok {
			t.Errorf("key %s = %q written beside a foreign key", k, v)
		}
	}
	for _, r := range c.reps {
		if !r.running() {
			t.Errorf("replica %s exited", r.name)
		}
		for _, task := range []string{"victim", "victim2"} {
			warnings := 0
			var sample logRec
			for _, rec := range r.records() {
				lvl := rec.str("level")
				if (lvl == "WARN" || lvl == "ERROR") && rec.str("task") == task && strings.Contains(rec.str("err"), "foreign") {
					warnings++
					sample = rec
				}
			}
			if warnings == 0 {
				t.Errorf("replica %s: no warning about the foreign value of %s's slot", r.name, task)
				continue
			}
			if !strings.Contains(sample.str("err"), task+":"+slot) {
				t.Errorf("replica %s: warning does not name the slot %s:%s: %v", r.name, task, slot, sample)
			}
			if r.name == "r1" {
				t.Logf("replica %s, task %s: %d warnings over the window, e.g. %s: %s: %s", r.name, task, warnings, sample.str("level"), sample.msg(), sample.str("err"))
			}
			r.awaitLog("the slot missed", 3*time.Second, func(rec logRec) bool {
				return rec.msg() == "slot window closed without a success" && rec.str("task") == task
			})
		}
	}
}
