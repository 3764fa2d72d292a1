-- redlock_align.lua: Redlock only. After a claim won on a quorum whose
-- nodes counted different attempt numbers (a node was down, or restarted
-- empty), renumber this node's grant to the quorum's attempt — the highest
-- any winner counted — so that the owner value is the same on every node,
-- and raise the node's counter to it, so that the next quorum (which shares
-- a node with this one) counts past it and no fencing token repeats.
--
-- KEYS[1]  state key     <prefix>:{<task>:<slot id>}
-- KEYS[2]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- ARGV[1]  the owner value this node granted, "run:<replica>:<its attempt>"
-- ARGV[2]  the quorum's owner value, "run:<replica>:<attempt>"
-- ARGV[3]  the quorum's attempt
-- ARGV[4]  attempts TTL, ms (>= done TTL)
--
-- Returns 1 when renumbered, 0 when the node no longer holds the grant
-- (its lease ran out): nothing is changed then.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
local n = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if n < tonumber(ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
end
return 1
