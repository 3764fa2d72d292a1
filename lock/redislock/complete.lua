-- complete.lua: turn N callers' running leases into the slots' done
-- markers, each with its history entry if it brings one. The keys and
-- arguments are N single-slot completions laid end to end.
--
-- For slot i (0-based), k = 2i and a = wi, where w, the arguments of one
-- slot, is 4 when no slot of the call brings an entry, else 29 (the
-- batcher fuses only calls of one shape):
-- KEYS[k+1]  state key
-- KEYS[k+2]  the task's history stream, or the state key again for no
--            entry (on a Redis Cluster always: the stream's hash slot is
--            another shard's, so its entry is appended apart)
-- ARGV[a+1]  owner value, "run:<replica>:<attempt>"
-- ARGV[a+2]  done prefix, "done:<replica>:<attempt>:" (the server's unix ms is appended)
-- ARGV[a+3]  done TTL, ms. The attempts counter is not touched: the claim
--            gave it (and the base, if any) a TTL that outlives the window
--            (claim.lua), and past the window nothing claims the slot while
--            the marker lives
-- ARGV[a+4]  done channel (one per prefix): watchers learn the slot is done
--            without claiming it again. One message per channel per call,
--            naming the state keys it marked done, one a line: a PUBLISH
--            per slot cost Redis more than the rest of the completion.
-- and, where w is 29:
-- ARGV[a+5]  the stream's MAXLEN, approximate
-- ARGV[a+6]  the stream's TTL, ms
-- ARGV[a+7]  "1": renew the stream's TTL with this entry; else only if the
--            entry creates the stream (it never exists without its TTL)
-- ARGV[a+8..a+29]  the entry: 11 field, value pairs; a pair whose field is
--            "" is left out (it pads an entry of fewer fields)
--
-- Returns an array of N replies, one per slot in order: 1 when the slot is
-- done by this owner — also when it already was, so that a call retried
-- after a lost reply reads the state instead of guessing; the entry was
-- then appended by the call that marked it, in the same step, and is not
-- appended again — 2 when the slot is done now but its entry could not be
-- appended (the stream key holds another type), 0 when the caller does not
-- hold the slot, or an error reply for that slot alone (a state key of the
-- wrong type). TIME is read once, by the first slot that needs it.
local now
local done = {} -- channel -> state keys marked done

local function record(k, a)
  local fields = {}
  for j = a + 8, a + 28, 2 do
    if ARGV[j] ~= '' then
      fields[#fields + 1] = ARGV[j]
      fields[#fields + 1] = ARGV[j + 1]
    end
  end
  local stream = KEYS[k + 2]
  if ARGV[a + 7] ~= '1' and redis.call('XADD', stream, 'NOMKSTREAM', 'MAXLEN', '~', ARGV[a + 5], '*', unpack(fields)) then
    return
  end
  -- The TTL is due, or the stream had gone (NOMKSTREAM added nothing):
  -- append, creating it if need be, and give it its TTL.
  redis.call('XADD', stream, 'MAXLEN', '~', ARGV[a + 5], '*', unpack(fields))
  redis.call('PEXPIRE', stream, ARGV[a + 6])
end

local out = {}
local w = #ARGV / (#KEYS / 2)
for i = 0, #KEYS / 2 - 1 do
  local k, a = 2 * i, w * i
  local ok, v = pcall(redis.call, 'GET', KEYS[k + 1])
  if not ok then
    out[#out + 1] = {err = tostring(v)}
  elseif v == ARGV[a + 1] then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    redis.call('SET', KEYS[k + 1], ARGV[a + 2] .. now, 'PX', ARGV[a + 3])
    local keys = done[ARGV[a + 4]]
    if not keys then
      keys = {}
      done[ARGV[a + 4]] = keys
    end
    keys[#keys + 1] = KEYS[k + 1]
    out[#out + 1] = 1
    if w > 4 and KEYS[k + 2] ~= KEYS[k + 1] and not pcall(record, k, a) then
      out[#out] = 2
    end
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
