-- claim.lua: try to take N slots, in one round trip. The keys and
-- arguments are N single-slot claims laid end to end (3 keys and 4
-- arguments each); the batcher fuses concurrent claims into one call this
-- way, since a Lua call costs Redis more than the few commands each slot
-- needs.
--
-- For slot i (0-based), k = 3i and a = 4i:
-- KEYS[k+1]  state key     slotd:{task:slotid}
-- KEYS[k+2]  attempts key  slotd:{task:slotid}:attempts
-- KEYS[k+3]  base key      slotd:{task:slotid}:base (attempts counted before the last rerun)
-- ARGV[a+1]  the claimant and its policy, "<lease>:<max>:<ttl>:<replica>":
--            the lease, ms; the max attempts; the attempts TTL, ms (the
--            done TTL: the counter, and the base if any, lives this long
--            from the claim, and at least until the deadline, so that it
--            outlives every claim, retry and rerun of the slot's window;
--            the completion does not touch it); the replica id. One
--            argument, the same for most slots of a call and parsed once
--            a call, where four cost Redis about 1,000 instructions each
--            to parse and hand to Lua (docs/performance.md)
-- ARGV[a+2]  earliest start, unix ms (slot time minus tolerance)
-- ARGV[a+3]  deadline, unix ms (end of the slot window)
-- ARGV[a+4]  "" or, when the caller's last claim of this slot is in doubt
--            (sent, its reply lost), the least attempt it may take over:
--            one above every attempt the caller was answered won for. A
--            "run:" value of the caller's own with such an attempt is that
--            claim, which landed, and no attempt ran under it. It is this
--            claim now: its lease is set again and it answers won with the
--            attempt it counted, so a lost reply costs no attempt. The
--            caller sends it on one claim only after each claim in doubt
--            (the Store takes its record as it sends: doubt.go), so two
--            claims of one process never both take one attempt over.
--
-- Returns an array of N replies, one per slot in order. A won slot whose
-- cap counts from the first attempt (base 0), the common case, is one
-- integer, now * 1000 + n: the caller holds the slot as attempt n (its own
-- claim in doubt, taken over, too), by this server's clock now (unix ms).
-- A Lua table per slot, and its 6-element reply, cost Redis about three
-- quarters of a microsecond a slot; the integer is exact (below 2^53)
-- until the year 2255. Any other reply is
-- {result, attempt, ms, server_now_ms, value, base}:
--   {"won", n, lease_ms, now, "", base}  won as attempt n after a rerun (base > 0)
--   {"held", 0, pttl, now, value, 0}     a replica runs it; value says who
--   {"done", 0, 0, now, value, 0}        the slot succeeded; value says who
--   {"exhausted", n, 0, now, "", base}   n attempts used, none left
--   {"early", 0, wait_ms, now, "", 0}    the slot time has not come by this server's clock
--   {"early", 0, wait_ms, now, value, 0} a retry backoff (value "backoff:<unix ms>") has not ended
--   {"late", 0, 0, now, "", 0}           the window has closed
--   {"late", 0, 0, now, value, 0}        a retry backoff ends at or after the deadline
--   {"foreign", 0, 0, now, value, 0}     a key holds a value slotd did not write
-- or an error reply for that slot alone (a key of the wrong type), so that
-- one slot's trouble does not fail the others.
-- The cap applies to the attempts since the last rerun (attempt - base);
-- attempt numbers themselves only grow, so fencing tokens never repeat, and
-- stop at 999, the most a token can encode.
-- The state is checked before the clock so that a finished slot reads as
-- done. Inside the window a free slot, the common case, is one where the
-- state key does not exist, so the state is first written with SET NX PX
-- as attempt 1's, which is that check: a state that exists is left as it
-- was and read (GET) as before; a retry backoff found ended is written
-- over the same way. The claim then counts the attempt, and takes the
-- state back (DEL) if it may not (foreign, exhausted, an error).
-- TIME is read once for all N slots: the script runs atomically. A
-- slot's first claim, the common case, creates its counter with SET NX PX
-- (one command where a GET, an INCR and a PEXPIRE were); a later one reads
-- it and writes it back with SET PX (a counter of the wrong type fails the
-- GET first: SET NX does not look at an existing key's type).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now1 = now * 1000 + 1 -- won as attempt 1 (base 0), the common reply

-- What the slots of one call share (their claimant, policy and window,
-- mostly) is turned into what the commands take once per call, by value:
-- tonumber of a string is two strtod calls, and a number given to SET is
-- formatted with printf first, where a table lookup by a string uses the
-- hash its interning computed. claimants[s] or claimant(s) is ARGV[a+1]
-- read: {lease, max, ttl, ttln, id, first}, first attempt 1's state
-- value; nums[s] or num(s) is tonumber(s); rests[d] or rest(d, deadline)
-- the rest of the window, as SET takes it.
local claimants, nums, rests = {}, {}, {}
local function claimant(s)
  local lease, max, ttl, id = string.match(s, '^(%-?%d+):(%-?%d+):(%-?%d+):(.*)$')
  if not id then
    error('slotd: claim argument ' .. s .. ' is not <lease>:<max>:<ttl>:<replica>', 0)
  end
  local c = {lease = lease, max = tonumber(max), ttl = ttl, ttln = tonumber(ttl), id = id, first = 'run:' .. id .. ':1'}
  claimants[s] = c
  return c
end
local function num(s)
  local v = tonumber(s)
  nums[s] = v
  return v
end
local function rest(s, deadline)
  local v = tostring(deadline - now)
  rests[s] = v
  return v
end

-- won is the reply of a won slot: attempt n, base as read (see above).
local function won(n, base, lease)
  if base == 0 then
    return now * 1000 + n
  end
  return {'won', n, tonumber(lease), now, '', base}
end

-- count takes the next attempt of a slot in its window whose state is
-- free and whose counter exists: n and the base, or a reply that it may
-- not. c is the claimant (ARGV[a+1] read), ttl the counter's.
local function count(k, c, ttl)
  local cv = redis.call('GET', KEYS[k + 2])
  local n = tonumber(cv)
  if not n then
    return {'foreign', 0, 0, now, cv, 0}
  end
  -- The base key lives exactly as long as the counter (rerun.lua sets it
  -- only beside one, and every claim gives both the same expiry).
  local b = redis.call('GET', KEYS[k + 3])
  local base = tonumber(b or '0')
  if not base then
    return {'foreign', 0, 0, now, b, 0}
  end
  if n - base >= c.max or n >= 999 then
    return {'exhausted', n, 0, now, '', base}
  end
  n = n + 1
  redis.call('SET', KEYS[k + 2], n, 'PX', ttl)
  if base > 0 then
    redis.call('PEXPIRE', KEYS[k + 3], ttl)
  end
  return n, base
end

-- counted finishes a claim that has written attempt 1's value to the
-- state key, once count has answered ok, r, base: the reply. A claim that
-- may not count deletes the state again.
local function counted(k, c, ok, r, base)
  local state = KEYS[k + 1]
  if not ok or type(r) == 'table' then
    redis.call('DEL', state)
    if not ok then
      error(r, 0) -- as raised, without this line's position
    end
    return r
  end
  if r > 1 then
    redis.call('SET', state, 'run:' .. c.id .. ':' .. r, 'PX', c.lease)
  end
  return won(r, base, c.lease)
end

local function claim(k, a)
  local state = KEYS[k + 1]
  local c = claimants[ARGV[a + 1]] or claimant(ARGV[a + 1])
  local earliest, deadline = nums[ARGV[a + 2]] or num(ARGV[a + 2]), nums[ARGV[a + 3]] or num(ARGV[a + 3])
  -- The done TTL as sent, unless the rest of the window is longer.
  local ttl = c.ttl
  if deadline - now > c.ttln then
    ttl = rests[ARGV[a + 3]] or rest(ARGV[a + 3], deadline)
  end
  if not (now >= earliest and now < deadline and redis.call('SET', state, c.first, 'NX', 'PX', c.lease)) then
    local v = redis.call('GET', state)
    if v then
      if string.sub(v, 1, 4) == 'run:' then
        local mine = 'run:' .. c.id .. ':'
        local n = ARGV[a + 4] ~= '' and string.sub(v, 1, #mine) == mine and tonumber(string.match(string.sub(v, #mine + 1), '^%d+$') or '')
        if n and n >= tonumber(ARGV[a + 4]) and now < deadline then
          local b = redis.call('GET', KEYS[k + 3])
          local base = tonumber(b or '0')
          if not base then
            return {'foreign', 0, 0, now, b, 0}
          end
          redis.call('SET', state, v, 'PX', c.lease)
          return won(n, base, c.lease)
        end
        return {'held', 0, redis.call('PTTL', state), now, v, 0}
      end
      if string.sub(v, 1, 5) == 'done:' then
        return {'done', 0, 0, now, v, 0}
      end
      local nb = string.match(v, '^backoff:(%d+)$')
      if not nb then
        return {'foreign', 0, 0, now, v, 0}
      end
      -- A failed attempt's retry backoff (release.lua): no attempt before
      -- its end, and none at all if it ends at or after the deadline. The
      -- key expires at that end; until then it is the slot's state.
      nb = tonumber(nb)
      if nb >= deadline then
        return {'late', 0, 0, now, v, 0}
      end
      if now < nb then
        return {'early', 0, nb - now, now, v, 0}
      end
    end
    if now < earliest then
      return {'early', 0, earliest - now, now, '', 0}
    end
    if now >= deadline then
      return {'late', 0, 0, now, '', 0}
    end
    -- A retry backoff that has ended by this clock but not yet expired: as
    -- a free slot (a claim that may not count leaves it deleted, as it
    -- would be at its expiry).
    redis.call('SET', state, c.first, 'PX', c.lease)
  end
  -- The state is attempt 1's. A slot without a counter, the common case,
  -- is attempt 1: the counter's SET NX PX cannot fail (SET does not look
  -- at a key's type, and Redis refuses a script's write for memory, a disk
  -- error or missing replicas before its first write only, which the
  -- state's was), so only a counter that exists is counted under pcall,
  -- for counted to undo the state if the claim may not count.
  if redis.call('SET', KEYS[k + 2], '1', 'NX', 'PX', ttl) then
    return now1
  end
  return counted(k, c, pcall(count, k, c, ttl))
end

-- The slots are claimed in one protected run, not one pcall each: a slot
-- that raises (a key of the wrong type) ends the run with its error as its
-- reply, and a new run goes on from the next slot. Its writes before the
-- error stay, as they would under a pcall of its own.
local out, slots, i = {}, #KEYS / 3, 0
local function run()
  while i < slots do
    out[i + 1] = claim(3 * i, 4 * i)
    i = i + 1
  end
end
while i < slots do
  local ok, r = pcall(run)
  if not ok then
    out[i + 1] = {err = tostring(r)}
    i = i + 1
  end
end
return out
