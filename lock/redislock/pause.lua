-- pause.lua: write one task's pause state and, if it changed, wake the
-- replicas. Not part of the slot protocol (model/slot.pml does not mirror
-- it): a replica reads the state before it claims a slot of the task.
--
-- KEYS[1]  pause state  <prefix>:paused:{<task>}, "paused" or "resumed"
-- ARGV[1]  "pause", "resume", or "seed" (pause unless a state is recorded)
-- ARGV[2]  TTL, ms
-- ARGV[3]  release channel, <prefix>:released
-- ARGV[4]  notice, <prefix>:control:{<task>}
--
-- Returns {paused, changed}: paused 1 if the task is paused after the
-- write, else 0; changed 1 if the state changed (and the replicas were woken).
local v = redis.call('GET', KEYS[1])
local want = 'paused'
if ARGV[1] == 'resume' then
  want = 'resumed'
elseif ARGV[1] == 'seed' and v then
  want = v
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
