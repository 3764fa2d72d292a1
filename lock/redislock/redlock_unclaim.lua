-- redlock_unclaim.lua: Redlock only. Undo this node's grant of a claim
-- that did not win on a quorum (a split vote, a late reply, a failed
-- renumbering): free the slot, give back the attempt the grant counted
-- (nobody ran it, so it must not count towards the cap, and it was never
-- anyone's fencing token). It wakes nobody: the contenders of a split
-- vote retry after a random delay (Redlock's), and waking them all at once
-- would only line them up for the next split.
--
-- KEYS[1]  state key     <prefix>:{<task>:<slot id>}
-- KEYS[2]  attempts key  <prefix>:{<task>:<slot id>}:attempts
-- ARGV[1]  the owner value this node granted, "run:<replica>:<attempt>"
-- ARGV[2]  that attempt
--
-- The counter goes back only while it still reads the grant's attempt and
-- the state is the grant's, or gone (its lease ran out while the round
-- went on): nothing counted past the grant then — the state key blocked
-- every other claim on this node until it went, and a later claim that
-- was won left its own state or a higher count behind.
--
-- Returns 1 when undone, 0 when another owner's state is there (nothing
-- is changed then).
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
  return 0
end
if v then
  redis.call('DEL', KEYS[1])
end
local n = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '') == n then
  if n > 1 then
    redis.call('SET', KEYS[2], n - 1, 'KEEPTTL')
  else
    redis.call('DEL', KEYS[2])
  end
end
return 1
