-- mutex_release.lua: undo one acquisition of a named lock; the last one
-- deletes it and wakes the waiters.
--
-- KEYS[1]  lock key  <prefix>:lock:{<name>}
-- ARGV[1]  owner id
-- ARGV[2]  channel   <prefix>:lock:released (the message is the lock key)
--
-- Returns the acquisitions still held by the owner (0: the lock is free),
-- or -1 when the caller does not hold the lock (nothing changed). The fence
-- key keeps its TTL: the next holder's token must be greater.
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], 'count', -1)
if n > 0 then
  return n
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 0
