-- mutex_fence.lua: Redlock only. Raise a node's fencing counter to the
-- token a quorum handed out, so that the next quorum, which shares a node
-- with this one, draws a greater token.
--
-- KEYS[1]  fence key  <prefix>:lock:{<name>}:fence
-- ARGV[1]  token
-- ARGV[2]  fence TTL, ms
--
-- Returns 1.
local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if c < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
