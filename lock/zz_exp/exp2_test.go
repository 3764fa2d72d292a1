package zzexp

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slotd/slotd/internal/redistest"
)

const vA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 0, #KEYS / 3 - 1 do
  local k, a = 3*i, 6*i
  local state = KEYS[k + 1]
  local v = redis.call('GET', state)
  local c = redis.call('GET', KEYS[k + 2])
  local n = tonumber(c or '0') + 1
  redis.call('SET', KEYS[k+2], n, 'PX', ARGV[a + 6])
  redis.call('SET', state, 'run:' .. ARGV[a + 1] .. ':' .. n, 'PX', ARGV[a + 2])
  out[i+1] = {'won', n, tonumber(ARGV[a + 2]), now, '', 0}
end
return out`

const vB = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 0, #KEYS / 3 - 1 do
  local k, a = 3*i, 6*i
  local state = KEYS[k + 1]
  local v = redis.call('GET', state)
  redis.call('SET', state, 'run:' .. ARGV[a + 1] .. ':1:' .. now, 'PX', ARGV[a + 6])
  out[i+1] = {'won', 1, tonumber(ARGV[a + 2]), now, '', 0}
end
return out`

const vC = `
local out = {}
for i = 0, #KEYS / 3 - 1 do
  out[i+1] = 1
end
return out`

const vD = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  redis.call('SET', KEYS[i], 'run:' .. ARGV[1] .. ':1:' .. now, 'PX', ARGV[2])
  out[i] = 1
end
return out`

func TestExp2(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
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
		for _, v := range []struct{ n, s string }{{"A 4calls", vA}, {"B 2calls", vB}, {"C nocalls", vC}} {
			s := redis.NewScript(v.s)
			p := fmt.Sprintf("r%d%s", round, v.n[:1])
			run(v.n, func(i0 int) error {
				var keys []string
				var args []any
				for i := i0; i < i0+B; i++ {
					st := fmt.Sprintf("slotd:{t%d:%s2024}", i%5000, p+strconv.Itoa(i))
					keys = append(keys, st, st+":attempts", st+":base")
					args = append(args, "r1", 15000, 3, now-1000, now+600000, 86400000)
				}
				return s.Run(ctx, c, keys, args...).Err()
			})
		}
		s := redis.NewScript(vD)
		p := fmt.Sprintf("r%dD", round)
		run("D compact 2calls", func(i0 int) error {
			var keys []string
			for i := i0; i < i0+B; i++ {
				keys = append(keys, fmt.Sprintf("slotd:{t%d:%s2024}", i%5000, p+strconv.Itoa(i)))
			}
			return s.Run(ctx, c, keys, "r1", 86400000).Err()
		})
	}
}
