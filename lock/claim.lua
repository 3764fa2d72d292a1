-- claim.lua: try to take one slot, in one round trip.
--
-- KEYS[1]  state key     slotd:{task:slotid}
-- KEYS[2]  attempts key  slotd:{task:slotid}:attempts
-- KEYS[3]  base key      slotd:{task:slotid}:base (attempts counted before the last rerun)
-- ARGV[1]  replica id
-- ARGV[2]  lease, ms
-- ARGV[3]  max attempts
-- ARGV[4]  earliest start, unix ms (slot time minus tolerance)
-- ARGV[5]  deadline, unix ms (end of the slot window)
-- ARGV[6]  attempts TTL, ms (>= done TTL)
--
-- Returns {result, attempt, ms, server_now_ms, value, base}:
--   {"won", n, lease_ms, now, ""}        the caller holds the slot as attempt n
--   {"held", 0, pttl, now, value}        a replica runs it; value says who
--   {"done", 0, 0, now, value}           the slot succeeded; value says who
--   {"exhausted", n, 0, now, ""}         n attempts used, none left
--   {"early", 0, wait_ms, now, ""}       the slot time has not come by this server's clock
--   {"late", 0, 0, now, ""}              the window has closed
--   {"foreign", 0, 0, now, value}        a key holds a value slotd did not write
-- The cap applies to the attempts since the last rerun (attempt - base);
-- attempt numbers themselves only grow, so fencing tokens never repeat, and
-- stop at 999, the most a token can encode.
-- The state is checked before the clock so that a finished slot reads as done.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local v = redis.call('GET', KEYS[1])
if v then
  if string.sub(v, 1, 4) == 'run:' then
    return {'held', 0, redis.call('PTTL', KEYS[1]), now, v, 0}
  end
  if string.sub(v, 1, 5) == 'done:' then
    return {'done', 0, 0, now, v, 0}
  end
  return {'foreign', 0, 0, now, v, 0}
end

local earliest = tonumber(ARGV[4])
if now < earliest then
  return {'early', 0, earliest - now, now, '', 0}
end
if now >= tonumber(ARGV[5]) then
  return {'late', 0, 0, now, '', 0}
end

local c = redis.call('GET', KEYS[2])
local n = tonumber(c or '0')
if not n then
  return {'foreign', 0, 0, now, c, 0}
end
local b = redis.call('GET', KEYS[3])
local base = tonumber(b or '0')
if not base then
  return {'foreign', 0, 0, now, b, 0}
end
if n - base >= tonumber(ARGV[3]) or n >= 999 then
  return {'exhausted', n, 0, now, '', base}
end

n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
if base > 0 then
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
redis.call('SET', KEYS[1], 'run:' .. ARGV[1] .. ':' .. n, 'PX', ARGV[2])
return {'won', n, tonumber(ARGV[2]), now, '', base}
