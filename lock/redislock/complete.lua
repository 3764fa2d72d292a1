-- complete.lua: turn N callers' running leases into the slots' done
-- markers, each with its history entry if it brings one. The keys and
-- arguments are N single-slot completions laid end to end.
--
-- For slot i (0-based), k = 2i and a = wi, where w, the arguments of one
-- slot, is 2 when no slot of the call brings an entry, else 13 (the
-- batcher fuses only calls of one shape):
-- KEYS[k+1]  state key
-- KEYS[k+2]  the task's history stream, or the state key again for no
--            entry (on a Redis Cluster always: the stream's hash slot is
--            another shard's, so its entry is appended apart)
-- ARGV[a+1]  owner value, "run:<replica>:<attempt>"; the done marker is
--            "done:<replica>:<attempt>:<the server's unix ms>"
-- ARGV[a+2]  where w is 2, the done TTL, ms. The attempts counter is not
--            touched: the claim gave it (and the base, if any) a TTL that
--            outlives the window (claim.lua), and past the window nothing
--            claims the slot while the marker lives.
--            Where w is 13, "<done TTL>:<maxlen>:<stream TTL>:<renew>":
--            the done TTL, ms; the stream's MAXLEN, approximate; the
--            stream's TTL, ms; "1" to renew the stream's TTL with this
--            entry, else "0" (renewed then only if the entry creates the
--            stream: it never exists without its TTL). One argument, the
--            same for most slots of a call and read once a call, where
--            four cost Redis about 1,000 instructions each to parse and
--            hand to Lua (docs/performance.md)
-- ARGV[a+3..a+13]  the entry's values, in the order of NAMES (the
--            history's entryNames); "output" and "backfilled" are left out
--            when "". The names are the script's, not arguments.
--
-- Returns an array of N replies, one per slot in order: 1 when the slot is
-- done by this owner — also when it already was, so that a call retried
-- after a lost reply reads the state instead of guessing; the entry was
-- then appended by the call that marked it, in the same step, and is not
-- appended again — 2 when the slot is done now but its entry could not be
-- appended (the stream key holds another type), 0 when the caller does not
-- hold the slot, or an error reply for that slot alone (a state key of the
-- wrong type). TIME is read once, by the first slot that needs it.
--
-- No one is told: a watcher of the slot learns that it is done when it
-- claims it again (a Completed notice is a hint, which a Redlock store
-- never sent either). Until 2026-11-30 the call published the state keys
-- it marked on a done channel, and every replica received and decoded
-- every completion's: the one cost of a slot that grew with the fleet,
-- on Redis and on every replica.
local now

local NAMES = {'slot', 'slot_time', 'attempt', 'token', 'replica', 'outcome',
  'started', 'duration_ms', 'error', 'output', 'backfilled'}

-- What the slots of one call share (an owner, a policy) is read once per
-- call, by value, as claim.lua does: params[s] or param(s) is ARGV[a+2]
-- read, {ttl, maxlen, sttl, renew}; prefixes[o] or prefix(o) owner o's
-- done prefix, "done:<replica>:<attempt>:"; dones[o] or done(o) its done
-- marker, the prefix and now.
local params, prefixes, dones = {}, {}, {}
local function param(s)
  local ttl, maxlen, sttl, renew = string.match(s, '^(%-?%d+):(%d+):(%d+):([01])$')
  local p = {ttl = ttl or s, maxlen = maxlen, sttl = sttl, renew = renew == '1'}
  params[s] = p
  return p
end
local function prefix(o)
  local v = 'done:' .. string.sub(o, 5) .. ':'
  prefixes[o] = v
  return v
end
local function done(o)
  local v = (prefixes[o] or prefix(o)) .. now
  dones[o] = v
  return v
end

-- xadd appends slot a's entry to stream, with p its ARGV[a+2] read; with
-- mk it creates the stream if need be, else (NOMKSTREAM) it returns false
-- if there is none. Most entries have neither output nor backfilled: they
-- are one call with the names in place, no table built for them.
local function xadd(stream, a, p, mk)
  local v = a + 2
  if ARGV[v + 10] == '' and ARGV[v + 11] == '' then
    if mk then
      return redis.call('XADD', stream, 'MAXLEN', '~', p.maxlen, '*',
        'slot', ARGV[v + 1], 'slot_time', ARGV[v + 2], 'attempt', ARGV[v + 3], 'token', ARGV[v + 4], 'replica', ARGV[v + 5],
        'outcome', ARGV[v + 6], 'started', ARGV[v + 7], 'duration_ms', ARGV[v + 8], 'error', ARGV[v + 9])
    end
    return redis.call('XADD', stream, 'NOMKSTREAM', 'MAXLEN', '~', p.maxlen, '*',
      'slot', ARGV[v + 1], 'slot_time', ARGV[v + 2], 'attempt', ARGV[v + 3], 'token', ARGV[v + 4], 'replica', ARGV[v + 5],
      'outcome', ARGV[v + 6], 'started', ARGV[v + 7], 'duration_ms', ARGV[v + 8], 'error', ARGV[v + 9])
  end
  local args = {'MAXLEN', '~', p.maxlen, '*'}
  if not mk then
    table.insert(args, 1, 'NOMKSTREAM')
  end
  for j = 1, #NAMES do
    if j < 10 or ARGV[v + j] ~= '' then
      args[#args + 1] = NAMES[j]
      args[#args + 1] = ARGV[v + j]
    end
  end
  return redis.call('XADD', stream, unpack(args))
end

-- record appends slot a's entry to stream where the common append (an
-- XADD NOMKSTREAM, in the run below) did not: the stream's TTL is due, or
-- the stream had gone. It appends, creating the stream if need be, and
-- gives it its TTL.
local function record(stream, a, p)
  xadd(stream, a, p, true)
  redis.call('PEXPIRE', stream, p.sttl)
end

-- The slots are completed in one protected run, not one pcall each: a
-- slot that raises (a state key of the wrong type) ends the run with its
-- error as its reply, and a new run goes on from the next slot. A slot's
-- reply is 2 while its entry is appended, so that an entry that raises
-- (a stream key of another type) leaves the slot done and answered 2.
local out, w, i = {}, #ARGV / (#KEYS / 2), 0
local slots = #KEYS / 2
local function run()
  while i < slots do
    local k, a = 2 * i, w * i
    local owner = ARGV[a + 1]
    local v = redis.call('GET', KEYS[k + 1])
    if v == owner then
      if not now then -- a string: formatting a number is printf's work, once
        local t = redis.call('TIME')
        now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
      end
      local p = params[ARGV[a + 2]] or param(ARGV[a + 2])
      redis.call('SET', KEYS[k + 1], dones[owner] or done(owner), 'PX', p.ttl)
      local stream = KEYS[k + 2]
      if w > 2 and stream ~= KEYS[k + 1] then
        out[i + 1] = 2
        if p.renew or not xadd(stream, a, p, false) then
          record(stream, a, p)
        end
      end
      out[i + 1] = 1
    elseif v and string.sub(v, 1, 5) == 'done:' then
      local pre = prefixes[owner] or prefix(owner)
      out[i + 1] = string.sub(v, 1, string.len(pre)) == pre and 1 or 0
    else
      out[i + 1] = 0
    end
    i = i + 1
  end
end
while i < slots do
  local ok, r = pcall(run)
  if not ok then
    if out[i + 1] ~= 2 then
      out[i + 1] = {err = tostring(r)}
    end
    i = i + 1
  end
end
return out
