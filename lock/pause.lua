-- pause.lua: write one task's pause state and, if it changed, wake the
-- replicas. Not part of the slot protocol (model/slot.pml does not mirror
-- it): a replica reads the state before it claims a slot of the task.
--
-- KEYS[1]  pause state  <prefix>:paused:{<task>}, "paused" or "resumed"
-- KEYS[2]  config value <prefix>:paused:{<task>}:config, the config's
--          paused value last applied, "paused" or "resumed"
-- ARGV[1]  "pause", "resume", "seed" (pause unless a state is recorded),
--          or "config" (apply the config's value, ARGV[5])
-- ARGV[2]  TTL, ms
-- ARGV[3]  release channel, <prefix>:released
-- ARGV[4]  notice, <prefix>:control:{<task>}
-- ARGV[5]  config: the config's value, "paused" or "resumed"
--
-- "config" is an operator's act only when the value changed: a value
-- unlike the one last applied sets the state; the same value leaves it (a
-- later pause or resume stands); with none applied yet (a first start, or
-- a state older than this key) a recorded state stands, and a task
-- without one is paused if the config says so.
--
-- Returns {paused, changed}: paused 1 if the task is paused after the
-- write, else 0; changed 1 if the state changed (and the replicas were woken).
local v = redis.call('GET', KEYS[1])
local want = 'paused'
if ARGV[1] == 'resume' then
  want = 'resumed'
elseif ARGV[1] == 'seed' and v then
  want = v
elseif ARGV[1] == 'config' then
  local applied = redis.call('GET', KEYS[2])
  redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[2])
  if applied and applied ~= ARGV[5] then
    want = ARGV[5]
  elseif v then
    want = v
  elseif ARGV[5] ~= 'paused' then
    return {0, 0}
  end
end
redis.call('SET', KEYS[1], want, 'PX', ARGV[2])
local changed = 0
if v ~= want then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  changed = 1
end
if want == 'paused' then
  return {1, changed}
end
return {0, changed}
