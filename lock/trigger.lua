-- trigger.lua: record an operator's run-now request for one task, at this
-- server's clock, and wake the replicas. Not part of the slot protocol
-- (model/slot.pml does not mirror it): it only lists slots for replicas to
-- claim; the claim of each is claim.lua's.
--
-- KEYS[1]  pending triggers  <prefix>:triggers:{<task>} (sorted set: member unix seconds, score unix ms)
-- KEYS[2]  idempotency keys  <prefix>:trigger-keys:{<task>} (sorted set: member a
--          request's key, score the unix second of the trigger it started;
--          absent: no key given)
-- ARGV[1]  window, ms: a trigger older than this is dropped
-- ARGV[2]  TTL of both keys, ms: an idempotency key older than this is dropped
-- ARGV[3]  release channel, <prefix>:released
-- ARGV[4]  notice, <prefix>:control:{<task>}
-- ARGV[5]  the request's idempotency key (with KEYS[2])
-- ARGV[6]  the most idempotency keys kept per task: the oldest go first
--
-- Returns {result, unix seconds}:
--   {"started", s}    a new trigger at second s
--   {"coalesced", s}  the task already had a trigger at second s: that one
--   {"repeated", s}   the idempotency key was seen: the trigger it started
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if KEYS[2] then
  local seen = redis.call('ZSCORE', KEYS[2], ARGV[5])
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
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', math.floor((now - tonumber(ARGV[2])) / 1000))
  local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6]) + 1
  if over > 0 then
    redis.call('ZPOPMIN', KEYS[2], over)
  end
  redis.call('ZADD', KEYS[2], sec, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
if result == 'started' then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return {result, tonumber(sec)}
