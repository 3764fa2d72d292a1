-- redlock_kv_put.lua: Redlock only. One node's compare-and-set of a name
-- of the quorum key-value store (redlock_kv.go): write a new version if the
-- name's version here is the one the writer read. The record written keeps
-- the one it replaces, so that a write that no quorum took can be undone
-- (redlock_kv_undo.lua).
--
-- KEYS[1]  the name's key         <prefix>:kv:<dir>/<name>
-- KEYS[2]  the directory's index  <prefix>:kv:<dir>
-- ARGV[1]  the version the writer read, a decimal id ("0": absent, expired or deleted)
-- ARGV[2]  the new version, a decimal id, never "0"
-- ARGV[3]  the value
-- ARGV[4]  TTL, ms; for a delete, ignored (the record keeps its TTL, for an undo)
-- ARGV[5]  "1" to delete the name (the record stays, marked deleted)
-- ARGV[6]  the channel its notices go to
-- ARGV[7]  the name (its member in the index)
--
-- The record is JSON: {id, v, del, pid, pv, pdel, px}: the version, the
-- value and the delete mark, and the same of the record it replaced with
-- that one's expiry (node ms; pid "0": none).
--
-- Publishes KEYS[1] on the channel when written, and KEYS[2] too when the
-- name appeared or went.
--
-- Returns {1, ARGV[2]} when written, {0, the version here} when not.
local old = redis.call('GET', KEYS[1])
local rec = old and cjson.decode(old)
local cur = '0'
if rec and not rec.del then
  cur = rec.id
end
if cur ~= ARGV[1] then
  return {0, cur}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local new = {id = ARGV[2], v = ARGV[3], del = ARGV[5] == '1', pid = '0', pv = '', pdel = false, px = 0}
if rec then
  new.pid, new.pv, new.pdel = rec.id, rec.v, rec.del
  new.px = now + math.max(redis.call('PTTL', KEYS[1]), 0)
end
if new.del then
  if not rec then
    return {1, ARGV[2]} -- nothing to delete, nothing to undo
  end
  redis.call('SET', KEYS[1], cjson.encode(new), 'KEEPTTL')
  redis.call('ZADD', KEYS[2], now + math.max(redis.call('PTTL', KEYS[1]), 0), ARGV[7])
else
  local ttl = tonumber(ARGV[4])
  redis.call('SET', KEYS[1], cjson.encode(new), 'PX', ttl)
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[7])
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
redis.call('PUBLISH', ARGV[6], KEYS[1])
if (cur == '0') ~= new.del then
  redis.call('PUBLISH', ARGV[6], KEYS[2])
end
return {1, ARGV[2]}
