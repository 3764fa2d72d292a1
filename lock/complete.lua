-- complete.lua: turn the caller's running lease into the slot's done marker.
--
-- KEYS[1]  state key
-- KEYS[2]  attempts key
-- KEYS[3]  base key (kept as long as the attempts key, if it exists)
-- ARGV[1]  owner value, "run:<replica>:<attempt>"
-- ARGV[2]  done prefix, "done:<replica>:<attempt>:" (the server's unix ms is appended)
-- ARGV[3]  done TTL, ms (also given to the attempts key, so it outlives nothing it guards)
-- ARGV[4]  done channel (one per prefix; the message is the state key): watchers
--          learn the slot is done without claiming it again
--
-- Returns 1 when the slot is done by this owner — also when it already was, so
-- that a call retried after a lost reply reads the state instead of guessing —
-- and 0 when the caller does not hold the slot.
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[1], ARGV[2] .. now, 'PX', ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  redis.call('PUBLISH', ARGV[4], KEYS[1])
  return 1
end
if v and string.sub(v, 1, string.len(ARGV[2])) == ARGV[2] then
  return 1
end
return 0
