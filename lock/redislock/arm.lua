-- arm.lua: ready a triggered slot for its first claim: its attempt counter
-- and base start at TriggerBase, so that its fencing tokens exceed those of
-- a scheduled slot of the same second. Changes nothing once the slot was
-- armed or claimed. Not mirrored by model/slot.pml: to claim.lua the slot
-- is one that was rerun after TriggerBase attempts.
--
-- KEYS[1]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- KEYS[2]  base key      <prefix>:{<task>:<slot id>}:base
-- ARGV[1]  TriggerBase
-- ARGV[2]  TTL, ms (the done TTL, as claim.lua gives the counter)
--
-- Returns 1 when armed now, 0 when it already was (or was claimed).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
return 1
