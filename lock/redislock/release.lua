-- release.lua: give N slots back after failed attempts and wake the peers
-- watching them. The keys and arguments are N single-slot releases laid
-- end to end.
--
-- For slot i (0-based):
-- KEYS[i+1]    state key
-- ARGV[2i+1]   owner value, "run:<replica>:<attempt>"
-- ARGV[2i+2]   release channel (one per prefix; the message is the state key)
--
-- Returns an array of N replies, one per slot in order: 1 when released, 0
-- when the caller did not hold the slot (never deleting a peer's lock), or
-- an error reply for that slot alone (a key of the wrong type).
local out = {}
for i = 1, #KEYS do
  local ok, v = pcall(redis.call, 'GET', KEYS[i])
  if not ok then
    out[i] = {err = tostring(v)}
  elseif v == ARGV[2 * i - 1] then
    redis.call('DEL', KEYS[i])
    redis.call('PUBLISH', ARGV[2 * i], KEYS[i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
