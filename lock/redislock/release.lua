-- release.lua: give N slots back after failed attempts and wake the peers
-- watching them. The keys and arguments are N single-slot releases laid
-- end to end.
--
-- For slot i (0-based):
-- KEYS[i+1]    state key
-- ARGV[3i+1]   owner value, "run:<replica>:<attempt>"
-- ARGV[3i+2]   release channel (one per prefix; the message is the state key)
-- ARGV[3i+3]   retry backoff, ms: 0 frees the slot at once; else the state
--              becomes "backoff:<not-before unix ms>" (this server's TIME
--              plus the backoff) for that long, and claims answer early
--              until then (claim.lua)
--
-- Returns an array of N replies, one per slot in order: 1 when released, 0
-- when the caller did not hold the slot (never deleting a peer's lock), or
-- an error reply for that slot alone (a key of the wrong type).
local now
local out = {}
for i = 1, #KEYS do
  local ok, v = pcall(redis.call, 'GET', KEYS[i])
  local backoff = tonumber(ARGV[3 * i])
  if not ok then
    out[i] = {err = tostring(v)}
  elseif v == ARGV[3 * i - 2] then
    if backoff > 0 then
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      redis.call('SET', KEYS[i], 'backoff:' .. (now + backoff), 'PX', backoff)
    else
      redis.call('DEL', KEYS[i])
    end
    redis.call('PUBLISH', ARGV[3 * i - 1], KEYS[i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
