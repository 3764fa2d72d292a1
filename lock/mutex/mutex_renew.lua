-- mutex_renew.lua: extend a named lock, if the caller still owns it.
--
-- KEYS[1]  lock key   <prefix>:lock:{<name>}
-- KEYS[2]  fence key  <prefix>:lock:{<name>}:fence
-- ARGV[1]  owner id
-- ARGV[2]  ttl, ms
-- ARGV[3]  fence TTL, ms
--
-- Returns 1 when renewed, 0 when the caller does not hold the lock. Neither
-- TTL is ever shortened (a reentry may have asked for a longer one).
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
