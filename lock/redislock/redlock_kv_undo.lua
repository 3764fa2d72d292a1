-- redlock_kv_undo.lua: Redlock only. Take back this node's part of a
-- write of the quorum key-value store (redlock_kv.go) that no quorum took:
-- if the name still holds that write, the record it replaced comes back,
-- with what was left of its TTL (or the name goes, if there was none or it
-- has run out). Only the writer undoes, only its own version, so a node
-- goes back to a version at most once per losing write.
--
-- KEYS[1]  the name's key         <prefix>:kv:<dir>/<name>
-- KEYS[2]  the directory's index  <prefix>:kv:<dir>
-- ARGV[1]  the version to take back
-- ARGV[2]  the channel its notices go to
-- ARGV[3]  the name (its member in the index)
--
-- Returns 1 when taken back, 0 when the name holds another version.
local old = redis.call('GET', KEYS[1])
if not old then
  return 0
end
local rec = cjson.decode(old)
if rec.id ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if rec.pid == '0' or rec.px <= now then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[3])
else
  local back = {id = rec.pid, v = rec.pv, del = rec.pdel, pid = '0', pv = '', pdel = false, px = 0}
  redis.call('SET', KEYS[1], cjson.encode(back), 'PX', rec.px - now)
  redis.call('ZADD', KEYS[2], rec.px, ARGV[3])
end
redis.call('PUBLISH', ARGV[2], KEYS[1])
if rec.del ~= (rec.pid == '0' or rec.pdel) then
  redis.call('PUBLISH', ARGV[2], KEYS[2])
end
return 1
