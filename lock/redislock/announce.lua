-- announce.lua: claim a replica id for one process instance, renew that
-- claim, or give it up. Not part of the slot protocol (model/slot.pml does
-- not mirror it): it only detects two live processes started with one id.
--
-- KEYS[1]  presence key  <prefix>:replica:{<replica id>}, value = instance nonce
-- ARGV[1]  instance nonce of the caller
-- ARGV[2]  TTL, ms; "0" gives the id up (deleted only if the caller holds it)
--
-- Returns {holder, pttl}:
--   {"", ttl}         the caller holds the id now (taken or renewed), or gave it up
--   {nonce, pttl}     another instance holds it for pttl ms more; nothing changed
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
  return {v, redis.call('PTTL', KEYS[1])}
end
if ARGV[2] == '0' then
  if v then
    redis.call('DEL', KEYS[1])
  end
  return {'', 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'', tonumber(ARGV[2])}
