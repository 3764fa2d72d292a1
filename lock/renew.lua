-- renew.lua: extend a running lease, if the caller still owns it.
--
-- KEYS[1]  state key
-- ARGV[1]  owner value, "run:<replica>:<attempt>"
-- ARGV[2]  lease, ms
--
-- Returns 1 when renewed, 0 when the caller no longer holds the slot.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
