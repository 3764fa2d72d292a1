-- complete.lua: turn N callers' running leases into the slots' done
-- markers. The keys and arguments are N single-slot completions laid end to
-- end.
--
-- For slot i (0-based), k = 3i and a = 4i:
-- KEYS[k+1]  state key
-- KEYS[k+2]  attempts key
-- KEYS[k+3]  base key (kept as long as the attempts key, if it exists)
-- ARGV[a+1]  owner value, "run:<replica>:<attempt>"
-- ARGV[a+2]  done prefix, "done:<replica>:<attempt>:" (the server's unix ms is appended)
-- ARGV[a+3]  done TTL, ms (also given to the attempts key, so it outlives nothing it guards)
-- ARGV[a+4]  done channel (one per prefix): watchers learn the slot is done
--            without claiming it again. One message per channel per call,
--            naming the state keys it marked done, one a line: a PUBLISH
--            per slot cost Redis more than the rest of the completion.
--
-- Returns an array of N replies, one per slot in order: 1 when the slot is
-- done by this owner — also when it already was, so that a call retried
-- after a lost reply reads the state instead of guessing — 0 when the
-- caller does not hold the slot, or an error reply for that slot alone (a
-- key of the wrong type). TIME is read once, by the first slot that needs it.
local now
local done = {} -- channel -> state keys marked done

local out = {}
for i = 0, #KEYS / 3 - 1 do
  local k, a = 3 * i, 4 * i
  local ok, v = pcall(redis.call, 'GET', KEYS[k + 1])
  if not ok then
    out[#out + 1] = {err = tostring(v)}
  elseif v == ARGV[a + 1] then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    redis.call('SET', KEYS[k + 1], ARGV[a + 2] .. now, 'PX', ARGV[a + 3])
    redis.call('PEXPIRE', KEYS[k + 2], ARGV[a + 3])
    redis.call('PEXPIRE', KEYS[k + 3], ARGV[a + 3])
    local keys = done[ARGV[a + 4]]
    if not keys then
      keys = {}
      done[ARGV[a + 4]] = keys
    end
    keys[#keys + 1] = KEYS[k + 1]
    out[#out + 1] = 1
  elseif v and string.sub(v, 1, string.len(ARGV[a + 2])) == ARGV[a + 2] then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
for channel, keys in pairs(done) do
  redis.call('PUBLISH', channel, table.concat(keys, '\n'))
end
return out
