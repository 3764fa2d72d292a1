-- rerun.lua: an operator's reset of one slot, so that it may run again
-- within its window; then wake the replicas watching it, as a release does.
-- The attempts counter is kept and the count so far becomes the base the
-- cap is measured from, so attempt numbers and fencing tokens keep growing.
-- A running or foreign state is left alone unless forced; a done one, or
-- a retry backoff (release.lua), is cleared.
--
-- KEYS[1]  state key     <prefix>:{<task>:<slot id>}
-- KEYS[2]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- KEYS[3]  base key      <prefix>:{<task>:<slot id>}:base
-- ARGV[1]  "1": clear a running or foreign state too; else refuse
-- ARGV[2]  the release channel, <prefix>:released
--
-- Returns {kind, state, attempts, n}:
--   kind      "cleared", or "running"/"foreign" when refused (nothing changed)
--   state     the state value before ("" if none)
--   attempts  the counter ("" if none)
--   n         cleared: replicas subscribed to the channel; refused: the state's PTTL in ms
local state = redis.call('GET', KEYS[1])
local attempts = redis.call('GET', KEYS[2]) or ''
if state and ARGV[1] ~= '1' then
  if string.sub(state, 1, 4) == 'run:' then
    return {'running', state, attempts, redis.call('PTTL', KEYS[1])}
  end
  if string.sub(state, 1, 5) ~= 'done:' and string.sub(state, 1, 8) ~= 'backoff:' then
    return {'foreign', state, attempts, redis.call('PTTL', KEYS[1])}
  end
end
redis.call('DEL', KEYS[1])
if tonumber(attempts) then
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl < 1 then ttl = 1 end
  redis.call('SET', KEYS[3], attempts, 'PX', ttl)
else
  redis.call('DEL', KEYS[2], KEYS[3])
  attempts = ''
end
local n = redis.call('PUBLISH', ARGV[2], KEYS[1])
return {'cleared', state or '', attempts, n}
