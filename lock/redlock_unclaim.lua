-- redlock_unclaim.lua: Redlock only. Undo this node's grant of a claim
-- that did not win on a quorum (a split vote, a late reply, a failed
-- renumbering): free the slot, give back the attempt the grant counted
-- (nobody ran it, so it must not count towards the cap, and it was never
-- anyone's fencing token), and wake the slot's watchers.
--
-- KEYS[1]  state key     <prefix>:{<task>:<slot id>}
-- KEYS[2]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- ARGV[1]  the owner value this node granted, "run:<replica>:<attempt>"
-- ARGV[2]  that attempt
-- ARGV[3]  release channel
--
-- The counter goes back only while it still reads the grant's attempt:
-- the state key blocked every other claim on this node until this script
-- deletes it, so nothing counted past it, unless the grant's lease ran out
-- first (then the state no longer matches and nothing is changed).
--
-- Returns 1 when undone, 0 when the node no longer holds the grant.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local n = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '') == n then
  if n > 1 then
    redis.call('SET', KEYS[2], n - 1, 'KEEPTTL')
  else
    redis.call('DEL', KEYS[2])
  end
end
redis.call('PUBLISH', ARGV[3], KEYS[1])
return 1
