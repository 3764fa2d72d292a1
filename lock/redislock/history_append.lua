-- history_append.lua: a stream's first append, or one that renews its
-- TTL: XADD and PEXPIRE in one step, so that the stream never exists
-- without its TTL. One key, so that appends of many tasks can share a
-- pipeline on Redis Cluster, whose transactions cannot span hash slots.
--
-- KEYS[1]   the task's history stream
-- ARGV[1]   TTL, ms
-- ARGV[2]   MAXLEN, approximate
-- ARGV[3..] the entry's field, value pairs
--
-- Returns the entry's id.
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return id
