-- release.lua: give a slot back after a failed attempt and wake the peers
-- watching it.
--
-- KEYS[1]  state key
-- ARGV[1]  owner value, "run:<replica>:<attempt>"
-- ARGV[2]  release channel (one per prefix; the message is the state key)
--
-- Returns 1 when released, 0 when the caller did not hold the slot (never
-- deleting a peer's lock).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 1
end
return 0
