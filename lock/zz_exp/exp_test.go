package zzexp

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotd/slotd/internal/redistest"
)

func cpu(t *testing.T, c *redis.Client) float64 {
	s, _ := c.Info(context.Background(), "cpu").Result()
	var tot float64
	for _, l := range strings.Split(s, "\r\n") {
		if strings.HasPrefix(l, "used_cpu_sys:") || strings.HasPrefix(l, "used_cpu_user:") {
			v, _ := strconv.ParseFloat(l[strings.Index(l, ":")+1:], 64)
			tot += v
		}
	}
	return tot
}

func TestExp(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	claim, _ := os.ReadFile("../claim.lua")
	complete, _ := os.ReadFile("../complete.lua")
	cs := redis.NewScript(string(claim))
	ps := redis.NewScript(string(complete))
	const N = 100000
	const B = 64
	now := time.Now().UnixMilli()
	run := func(name string, f func(i0 int) error) {
		c0 := cpu(t, c)
		for i := 0; i < N; i += B {
			if err := f(i); err != nil {
				t.Fatal(err)
			}
		}
		c1 := cpu(t, c)
		fmt.Printf("%-30s %.2f us/slot\n", name, (c1-c0)/N*1e6)
	}
	for round := 0; round < 2; round++ {
		p := fmt.Sprintf("r%d", round)
		run("claim", func(i0 int) error {
			var keys []string
			var args []any
			for i := i0; i < i0+B; i++ {
				st := fmt.Sprintf("slotd:{t%d:%s2024}", i%5000, p+strconv.Itoa(i))
				keys = append(keys, st, st+":attempts", st+":base")
				args = append(args, "r1", 15000, 3, now-1000, now+600000, 86400000)
			}
			return cs.Run(ctx, c, keys, args...).Err()
		})
		run("complete", func(i0 int) error {
			var keys []string
			var args []any
			for i := i0; i < i0+B; i++ {
				st := fmt.Sprintf("slotd:{t%d:%s2024}", i%5000, p+strconv.Itoa(i))
				keys = append(keys, st, st+":attempts", st+":base")
				args = append(args, "run:r1:1", "done:r1:1:", 86400000, "slotd:done")
			}
			return ps.Run(ctx, c, keys, args...).Err()
		})
		run("xadd+pexpire", func(i0 int) error {
			pp := c.Pipeline()
			for i := i0; i < i0+B; i++ {
				k := fmt.Sprintf("slotd:history:{t%d}", i%5000)
				pp.XAdd(ctx, &redis.XAddArgs{Stream: k, MaxLen: 1000, Approx: true, Values: []any{"slot", "2024", "attempt", 1, "result", "ok", "replica", "r1", "started", now, "ended", now}})
				pp.PExpire(ctx, k, time.Hour*24*7)
			}
			_, err := pp.Exec(ctx)
			return err
		})
		run("setnx-px pipeline", func(i0 int) error {
			pp := c.Pipeline()
			for i := i0; i < i0+B; i++ {
				pp.SetNX(ctx, fmt.Sprintf("raw:%s:%d", p, i), "owner", 15*time.Second)
			}
			_, err := pp.Exec(ctx)
			return err
		})
	}
}
