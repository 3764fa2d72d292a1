-- occupy.lua: record one slot's attempt as the one running its task, for
-- the concurrency policies forbid and replace. Taken after the slot's own
-- claim, on a key of the task's own (another Cluster hash tag): see
-- docs/design.md for why the two steps are safe. Not mirrored by
-- model/slot.pml: the slot's keys are not touched.
--
-- KEYS[1]  running key  <prefix>:running:{<task>}, "<slot id> run:<owner>:<attempt>"
-- ARGV[1]  the caller's record
-- ARGV[2]  lease, ms
-- ARGV[3]  "replace": take the place of another slot's attempt; else forbid
-- ARGV[4]  release channel, <prefix>:released
-- ARGV[5]  notice, <prefix>:control:{<task>}
--
-- Returns {result, other, pttl}:
--   {"taken", "", 0}         recorded (no other record, or one of this slot's)
--   {"busy", record, pttl}   another slot's attempt runs; nothing changed
--   {"replaced", record, 0}  recorded in its place; the task's watchers
--                            are woken (its holder renews, finds it gone, and stops)
local v = redis.call('GET', KEYS[1])
local function slotOf(r)
  return string.match(r, '^(%S+) ')
end
if v and v ~= ARGV[1] and slotOf(v) ~= slotOf(ARGV[1]) then
  if ARGV[3] ~= 'replace' then
    return {'busy', v, redis.call('PTTL', KEYS[1])}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return {'replaced', v, 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'taken', '', 0}
