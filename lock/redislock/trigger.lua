-- trigger.lua: record an operator's run-now request for one task, at this
-- server's clock, and wake the replicas. Not part of the slot protocol
-- (model/slot.pml does not mirror it): it only lists slots for replicas to
-- claim; the claim of each is claim.lua's.
--
-- KEYS[1]  pending triggers  <prefix>:triggers:{<task>} (sorted set: member unix seconds, score unix ms)
-- KEYS[2]  idempotency key   <prefix>:trigger:{<task>}:<key> (absent: no key given)
-- ARGV[1]  window, ms: a trigger older than this is dropped
-- ARGV[2]  TTL of both keys, ms
-- ARGV[3]  release channel, <prefix>:released
-- ARGV[4]  notice, <prefix>:control:{<task>}
--
-- Returns {result, unix seconds}:
--   {"started", s}    a new trigger at second s
--   {"coalesced", s}  the task already had a trigger at second s: that one
--   {"repeated", s}   the idempotency key was seen: the trigger it started
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if KEYS[2] then
  local seen = redis.call('GET', KEYS[2])
  if seen then
    return {'repeated', tonumber(seen)}
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
local sec = tostring(tonumber(t[1]))
local result = 'coalesced'
if not redis.call('ZSCORE', KEYS[1], sec) then
  redis.call('ZADD', KEYS[1], now, sec)
  result = 'started'
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] then
  redis.call('SET', KEYS[2], sec, 'PX', ARGV[2])
end
if result == 'started' then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return {result, tonumber(sec)}
