-- redlock_kv_read.lua: Redlock only. Read one directory of the quorum
-- key-value store (redlock_kv.go) on this node: every live name with its
-- record, or one name's. Names whose key is gone (its TTL ran out) leave
-- the directory's index here.
--
-- KEYS[1]  the directory's index  <prefix>:kv:<dir> (a sorted set of names, scored by expiry, node ms)
-- ARGV[1]  the prefix of its names' keys, "<prefix>:kv:<dir>/"
-- ARGV[2]  a name to read alone, or "" for every name
--
-- The names' keys are built here, not passed: a Redlock node is one
-- server, never a Cluster.
--
-- Returns {name, record, PTTL ms, ...} for each name whose key exists
-- (record: the JSON of redlock_kv_put.lua).
local names
if ARGV[2] ~= '' then
  names = {ARGV[2]}
else
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  names = redis.call('ZRANGE', KEYS[1], 0, -1)
end
local out = {}
for _, name in ipairs(names) do
  local k = ARGV[1] .. name
  local v = redis.call('GET', k)
  if v then
    out[#out + 1] = name
    out[#out + 1] = v
    out[#out + 1] = redis.call('PTTL', k)
  elseif ARGV[2] == '' then
    redis.call('ZREM', KEYS[1], name)
  end
end
return out
