-- live.lua: keep the fleet's set of live replica ids, and read it. Not part
-- of the slot protocol (model/slot.pml does not mirror it): the set only
-- says which replica is a slot's preferred claimant (scheduler/prefer.go),
-- a choice that affects who claims first, never whether a claim is safe.
--
-- KEYS[1]  fleet key  <prefix>:fleet, a sorted set: replica id → expiry, unix ms (server clock)
-- ARGV[1]  replica id
-- ARGV[2]  TTL, ms; "0" removes the id
-- ARGV[3]  channel, or "" for none: when the set's members change (the id
--          joined or left, or expired ones were dropped), "fleet" is
--          published on it, so that the other replicas read the set again
--          at once (lock.Fleet.OnFleetChange). A renewal changes no member
--          and publishes nothing.
--
-- Returns the ids live now (expired ones are dropped), lowest expiry first.
-- The key expires with its last member.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local changed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ttl > 0 then
  changed = changed + redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
else
  changed = changed + redis.call('ZREM', KEYS[1], ARGV[1])
end
if changed > 0 and ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[3], 'fleet')
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
