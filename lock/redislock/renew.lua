-- renew.lua: extend N running leases, each if the caller still owns it. The
-- keys and arguments are N single-slot renewals laid end to end.
--
-- For slot i (0-based):
-- KEYS[i+1]    state key
-- ARGV[2i+1]   owner value, "run:<replica>:<attempt>"
-- ARGV[2i+2]   lease, ms
--
-- Returns an array of N replies, one per slot in order: 1 when renewed, 0
-- when the caller no longer holds the slot, or an error reply for that slot
-- alone (a key of the wrong type).
local out = {}
for i = 1, #KEYS do
  local ok, v = pcall(redis.call, 'GET', KEYS[i])
  if not ok then
    out[i] = {err = tostring(v)}
  elseif v == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
