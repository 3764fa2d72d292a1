-- rerun.lua: clear a slot's state and attempts counter so that it may run
-- again within its window, then wake the replicas watching it, as a release
-- does. A running or foreign state is left alone unless forced.
--
-- KEYS[1]  state key     <prefix>:{<task>:<slot id>}
-- KEYS[2]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- ARGV[1]  "1": clear a running or foreign state too; else refuse
-- ARGV[2]  the release channel, <prefix>:released
--
-- Returns {kind, state, attempts, n}:
--   kind      "cleared", or "running"/"foreign" when refused (nothing changed)
--   state     the state value before ("" if none)
--   attempts  the counter before ("" if none)
--   n         cleared: replicas subscribed to the channel; refused: the state's PTTL in ms
local state = redis.call('GET', KEYS[1])
local attempts = redis.call('GET', KEYS[2]) or ''
if state and ARGV[1] ~= '1' then
  if string.sub(state, 1, 4) == 'run:' then
    return {'running', state, attempts, redis.call('PTTL', KEYS[1])}
  end
  if string.sub(state, 1, 5) ~= 'done:' then
    return {'foreign', state, attempts, redis.call('PTTL', KEYS[1])}
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
local n = redis.call('PUBLISH', ARGV[2], KEYS[1])
return {'cleared', state or '', attempts, n}
