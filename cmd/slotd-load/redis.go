package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redisfloor"
)

// server is the redis-server this run starts: a free loopback port, no
// persistence, stopped by its pid.
type server struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis(bin, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &server{cmd: cmd, addr: addr}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer within 10s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// commandStats reads INFO commandstats: calls per command.
func commandStats(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("info commandstats: line %q: %w", sc.Text(), err)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out, nil
}

// serverCPU reads INFO cpu: the server's user + system CPU seconds.
func serverCPU(ctx context.Context, c *redis.Client) (float64, error) {
	return infoSum(ctx, c, "cpu", "used_cpu_sys", "used_cpu_user")
}

// keyLookups reads INFO stats: keyspace_hits + keyspace_misses, the keys
// read by any command (an MGET counts each of its keys, commandstats one
// call).
func keyLookups(ctx context.Context, c *redis.Client) (int64, error) {
	n, err := infoSum(ctx, c, "stats", "keyspace_hits", "keyspace_misses")
	return int64(n), err
}

// infoSum reads INFO section and sums the named fields.
func infoSum(ctx context.Context, c *redis.Client, section string, fields ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("info %s: %w", section, err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if slices.Contains(fields, k) {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("info %s: %q: %w", section, line, err)
			}
			total += f
		}
	}
	return total, nil
}

// compareAndDelete is the raw baseline's release: delete the key only if it
// still holds our value.
var compareAndDelete = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// Baseline is raw go-redis on the same server: SET NX PX to claim,
// compare-and-delete to release.
type Baseline struct {
	Keys              int     `json:"keys"`
	SequentialCycles  float64 `json:"sequential_cycles_per_s"` // one client, claim + release, one round trip each
	Clients           int     `json:"clients"`
	Batch             int     `json:"batch"`
	PipelinedClaims   float64 `json:"pipelined_claims_per_s"`   // every client claims every key, batch per round trip
	PipelinedReleases float64 `json:"pipelined_releases_per_s"` // the winners release theirs, batch per round trip
	Won               int     `json:"won"`
	// PlainSlotCPU is Redis's CPU per slot, in µs, for a slot done with
	// three plain commands, pipelined batch per round trip, on fresh keys:
	// SET NX PX (a claim), SET XX PX (a completion) and XADD MAXLEN ~ of
	// an entry the size of slotd's (the history), over PlainSlots slots.
	// It checks nothing, so it is the least a slot's Redis share can be.
	PlainSlotCPU float64 `json:"plain_slot_redis_cpu_us"`
	PlainSlots   int     `json:"plain_slots"`
	// FloorSlotCPU (-floor) is Redis's CPU per slot, in µs, for as many
	// slots as the run's window, on as many tasks, through the floor
	// protocol (internal/redisfloor: the least a checked, recorded slot
	// asks of Redis 7.0), fused batch slots a call: the same keyspace
	// growth and history streams as the run, so that slotd's figure reads
	// against it. The server is emptied after it.
	FloorSlotCPU float64 `json:"floor_slot_redis_cpu_us,omitempty"`
	FloorSlots   int     `json:"floor_slots,omitempty"`
}

// floorSlots measures Baseline.FloorSlotCPU: n fresh slots over tasks
// tasks, claimed and completed through the floor's scripts, batch slots a
// call, from one client (redisfloor.Lagged); then it empties the server (FLUSHALL), so that
// the run starts on the keyspace it would have had without it.
func floorSlots(ctx context.Context, c *redis.Client, n, tasks, batch int) (float64, error) {
	if err := redisfloor.Streams(ctx, c, "slotd", tasks); err != nil {
		return 0, fmt.Errorf("floor: streams: %w", err)
	}
	lease, ttl := 15*time.Second, time.Minute
	cpu0, err := serverCPU(ctx, c)
	if err != nil {
		return 0, err
	}
	err = redisfloor.Lagged("slotd", n, tasks, batch,
		func(s redisfloor.Slots) error { return s.Claim(ctx, c, lease, ttl) },
		func(s redisfloor.Slots) error { return s.Complete(ctx, c, ttl) })
	if err != nil {
		return 0, err
	}
	cpu1, err := serverCPU(ctx, c)
	if err != nil {
		return 0, err
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		return 0, fmt.Errorf("floor: flushall: %w", err)
	}
	return (cpu1 - cpu0) / float64(n) * 1e6, nil
}

// runBaseline measures the raw baseline on keys distinct keys: sequential
// lock cycles on one client, then the burst slotd faces — clients racing
// for every key, pipelined batch at a time — and the winners' releases.
func runBaseline(ctx context.Context, addr string, keys, clients, batch int) (Baseline, error) {
	b := Baseline{Keys: keys, Clients: clients, Batch: batch}
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	}
	ttl := time.Minute
	seq := newClient()
	defer seq.Close()
	if err := compareAndDelete.Load(ctx, seq).Err(); err != nil {
		return b, fmt.Errorf("baseline: load script: %w", err)
	}
	// Each measure is repeated on fresh keys until it has run for
	// baselineRounds seconds (at least 3 times); the median rate is reported.
	var seqTimes []float64
	for round := 0; round < 3 || (sum(seqTimes) < baselineRounds && round < 50); round++ {
		t0 := time.Now()
		for i := range keys {
			key := fmt.Sprintf("baseline:seq:%d:%d", round, i)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ok, err := seq.SetNX(cctx, key, "c0", ttl).Result()
			if err == nil && ok {
				err = compareAndDelete.Run(cctx, seq, []string{key}, "c0").Err()
			}
			cancel()
			if err != nil {
				return b, fmt.Errorf("baseline: sequential cycle on %s: %w", key, err)
			}
		}
		seqTimes = append(seqTimes, time.Since(t0).Seconds())
	}
	b.SequentialCycles = float64(keys) / median(seqTimes)

	cs := make([]*redis.Client, clients)
	for i := range cs {
		cs[i] = newClient()
		defer cs[i].Close()
		if err := cs[i].Ping(ctx).Err(); err != nil { // connect before the clock starts
			return b, fmt.Errorf("baseline: %w", err)
		}
	}
	var claimTimes, releaseTimes []float64
	for round := 0; round < 3 || (sum(claimTimes) < baselineRounds && round < 50); round++ {
		claimed, released, won, err := pipelinedRound(ctx, cs, fmt.Sprintf("baseline:pipe:%d:", round), keys, batch, ttl)
		if err != nil {
			return b, err
		}
		if won != keys {
			return b, fmt.Errorf("baseline: %d of %d keys won: the race is broken", won, keys)
		}
		claimTimes, releaseTimes = append(claimTimes, claimed.Seconds()), append(releaseTimes, released.Seconds())
		b.Won = won
	}
	b.PipelinedClaims = float64(keys*clients) / median(claimTimes)
	b.PipelinedReleases = float64(keys) / median(releaseTimes)
	var err error
	b.PlainSlotCPU, b.PlainSlots, err = plainSlots(ctx, cs, keys, batch, ttl)
	return b, err
}

// plainSlots measures Baseline.PlainSlotCPU: rounds of keys fresh slots,
// split among the clients, each slot's three commands in one client's
// pipeline, batch slots per round trip, until the rounds have run for
// plainRounds seconds (at least 3). It returns the server's CPU (INFO cpu)
// per slot over all rounds, in µs, and the slots.
func plainSlots(ctx context.Context, cs []*redis.Client, keys, batch int, ttl time.Duration) (float64, int, error) {
	// An entry as slotd's history writes a no-op success's (lock/redislock
	// entryFields).
	entry := []any{"slot", "20260101000000", "slot_time", "2026-01-01T00:00:00Z", "attempt", "1", "token", "1767225600001",
		"replica", "r1", "outcome", "success", "started", "2026-01-01T00:00:00.012345678Z", "duration_ms", "0", "error", ""}
	cpu0, err := serverCPU(ctx, cs[0])
	if err != nil {
		return 0, 0, err
	}
	var elapsed time.Duration
	slots := 0
	for round := 0; round < 3 || elapsed.Seconds() < plainRounds; round++ {
		t0 := time.Now()
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		for ci, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for from := ci * batch; from < keys; from += len(cs) * batch {
					p := c.Pipeline()
					for i := from; i < min(from+batch, keys); i++ {
						key := fmt.Sprintf("baseline:plain:%d:{t%d:%d}", round, i, round)
						p.SetArgs(ctx, key, "run:r1:1", redis.SetArgs{Mode: "NX", TTL: ttl})
						p.SetArgs(ctx, key, "done:r1:1:1767225600012", redis.SetArgs{Mode: "XX", TTL: ttl})
						p.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("baseline:plain:history:{t%d}", i), MaxLen: 1000, Approx: true, Values: entry})
					}
					if _, err := p.Exec(ctx); err != nil {
						errs[ci] = fmt.Errorf("baseline: plain slots: %w", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, 0, err
		}
		elapsed += time.Since(t0)
		slots += keys
	}
	cpu1, err := serverCPU(ctx, cs[0])
	if err != nil {
		return 0, 0, err
	}
	return (cpu1 - cpu0) / float64(slots) * 1e6, slots, nil
}

// plainRounds is how long, in seconds, the plain slots run at least: INFO
// cpu counts in microseconds, and a fraction of a second of work is
// within the noise of the machine's other load.
const plainRounds = 1.0

// baselineRounds is how long, in seconds, each baseline measure runs at
// least, so that a small configuration's figures are not one blip.
const baselineRounds = 0.5

// pipelinedRound races the clients for every key under prefix, batch
// commands per round trip, then has the winners release theirs the same
// way; it returns how long each phase took and how many keys were won.
func pipelinedRound(ctx context.Context, cs []*redis.Client, prefix string, keys, batch int, ttl time.Duration) (claimed, released time.Duration, won int, err error) {
	clients := len(cs)
	wonKeys := make([][]string, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			val := "c" + strconv.Itoa(i)
			for lo := 0; lo < keys; lo += batch {
				hi := min(lo+batch, keys)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				p := c.Pipeline()
				cmds := make([]*redis.BoolCmd, 0, hi-lo)
				for k := lo; k < hi; k++ {
					cmds = append(cmds, p.SetNX(cctx, prefix+strconv.Itoa(k), val, ttl))
				}
				_, err := p.Exec(cctx)
				cancel()
				if err != nil {
					errs[i] = fmt.Errorf("baseline: pipelined claims: %w", err)
					return
				}
				for j, cmd := range cmds {
					if cmd.Val() {
						wonKeys[i] = append(wonKeys[i], prefix+strconv.Itoa(lo+j))
					}
				}
			}
		}()
	}
	wg.Wait()
	claimed = time.Since(t0)
	t0 = time.Now()
	for i, c := range cs {
		won += len(wonKeys[i])
		wg.Add(1)
		go func() {
			defer wg.Done()
			val := "c" + strconv.Itoa(i)
			ks := wonKeys[i]
			for lo := 0; lo < len(ks); lo += batch {
				hi := min(lo+batch, len(ks))
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				p := c.Pipeline()
				for _, k := range ks[lo:hi] {
					compareAndDelete.EvalSha(cctx, p, []string{k}, val)
				}
				_, err := p.Exec(cctx)
				cancel()
				if err != nil && errs[i] == nil {
					errs[i] = fmt.Errorf("baseline: pipelined releases: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	released = time.Since(t0)
	return claimed, released, won, errors.Join(errs...)
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// luaCallsCounted says whether this redis-server counts the commands a Lua
// script calls in INFO commandstats (Redis 7 does: a script's inner calls
// appear under their own names beside its eval/evalsha), so that a reader
// knows what "commands per slot" counts. It runs one script calling
// EXISTS three times and reads the difference.
func luaCallsCounted(ctx context.Context, c *redis.Client) (bool, error) {
	before, err := commandStats(ctx, c)
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	script := `for i = 1, 3 do redis.call("exists", KEYS[1]) end return 0`
	if err := c.Eval(cctx, script, []string{"slotd-load:lua-count"}).Err(); err != nil {
		return false, fmt.Errorf("lua count check: %w", err)
	}
	after, err := commandStats(ctx, c)
	if err != nil {
		return false, err
	}
	return after["exists"]-before["exists"] >= 3, nil
}
