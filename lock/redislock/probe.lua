-- probe.lua: show that the store takes a script's write under the prefix,
-- as a claim needs: the same command (EVALSHA), a key of the prefix, a
-- write refused at maxmemory (OOM), by an ACL without the prefix (NOPERM)
-- and on a read-only replica (READONLY).
--
-- KEYS[1]  probe key, "<prefix>:probe:{<replica>}"
-- ARGV[1]  value (the replica id)
-- ARGV[2]  TTL, ms
--
-- Returns 1, or the store's error reply.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
