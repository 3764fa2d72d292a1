-- occupy.lua: record one slot's attempt as the one running its task, for
-- the concurrency policies forbid and replace. Taken after the slot's own
-- claim, on a key of the task's own (another Cluster hash tag): see
-- docs/design.md for why the two steps are safe. Mirrored by
-- model/controls.pml (its occupy).
--
-- KEYS[1]  running key   <prefix>:running:{<task>}, "<slot id> run:<owner>:<attempt>"
-- KEYS[2]  replaced key  <prefix>:running:{<task>}:replaced, the record a
--          replace last took the place of (TTL the lease)
-- ARGV[1]  the caller's record
-- ARGV[2]  lease, ms
-- ARGV[3]  "replace": take the place of another slot's attempt; else forbid
-- ARGV[4]  release channel, <prefix>:released
-- ARGV[5]  notice, <prefix>:control:{<task>}
--
-- Returns {result, other, pttl}:
--   {"taken", "", 0}         recorded (no other record, or one of this slot's)
--   {"taken", record, 0}     replace: recorded, and another slot's record was
--                            replaced within a lease (by an earlier call for this
--                            slot: a lost reply, a retry); that attempt may still
--                            be stopping
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
  redis.call('SET', KEYS[2], v, 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return {'replaced', v, 0}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] == 'replace' then
  local r = redis.call('GET', KEYS[2])
  if r and slotOf(r) ~= slotOf(ARGV[1]) then
    return {'taken', r, 0}
  end
end
return {'taken', '', 0}
