-- mutex_acquire.lua: take a named lock for an owner, or take it again if the
-- owner already holds it (reentrancy), in one round trip.
--
-- KEYS[1]  lock key   <prefix>:lock:{<name>}, a hash: owner, count, token
-- KEYS[2]  fence key  <prefix>:lock:{<name>}:fence, the fencing counter
-- ARGV[1]  owner id
-- ARGV[2]  ttl, ms
-- ARGV[3]  fence TTL, ms (>= ttl: the counter outlives every hold)
--
-- Returns {result, count, token, pttl}:
--   {"obtained", 1, token, ttl}     the lock was free; token is a new fencing token
--   {"reentered", n, token, pttl}   the owner held it; now n times, same token
--   {"held", 0, 0, pttl}            another owner holds it for pttl ms more
--   {"foreign", 0, 0, pttl}         the key is a hash this script did not write
-- A new counter starts at the server's time in microseconds, so that tokens
-- keep growing even after an idle lock's counter has expired.
-- A reentry never shortens the lock's TTL, nor does it draw a new token: the
-- hold, not each nested call, is what a downstream store fences.
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {'foreign', 0, 0, redis.call('PTTL', KEYS[1])}
  end
  if redis.call('EXISTS', KEYS[2]) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', KEYS[2], t[1] .. string.sub('000000' .. t[2], -6))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {'obtained', 1, token, tonumber(ARGV[2])}
end
if owner ~= ARGV[1] then
  return {'held', 0, 0, redis.call('PTTL', KEYS[1])}
end
local n = redis.call('HINCRBY', KEYS[1], 'count', 1)
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return {'reentered', n, tonumber(redis.call('HGET', KEYS[1], 'token')), redis.call('PTTL', KEYS[1])}
