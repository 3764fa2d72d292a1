-- history_read.lua: read a page of a task's history stream, newest first,
-- as XREVRANGE end - COUNT n does, with every entry bounded whoever wrote
-- it: a value longer than its cap is cut (the tail of "output", the head of
-- any other field), a field name longer than the name cap and the fields
-- past the count cap are left out, and the entry gets a field "cut" that
-- says what was cut and how large it was. slotd's own appends are within
-- the caps; a larger entry was planted. Given a budget, the stream is
-- read a few entries at a time, and the page ends early once its values
-- pass the budget, so that a page of large entries costs the server about
-- the budget, not n entries.
--
-- KEYS[1]  the stream (HistoryKey)
-- ARGV[1]  end id, inclusive ("+": the newest)
-- ARGV[2]  COUNT
-- ARGV[3]  cap of a value other than "output", in bytes
-- ARGV[4]  cap of the "output" value, in bytes
-- ARGV[5]  cap of a field name, in bytes
-- ARGV[6]  cap of the fields of one entry
-- ARGV[7]  budget of the page's values, in bytes (0: none); the entry
--          that passes it is the page's last
-- ARGV[8]  how many of the newest entries keep their output (the others
--          leave the field out)
--
-- Returns XREVRANGE's reply: {{id, {field, value, ...}}, ...}; an empty
-- array if the stream does not exist; an error reply for a key of another
-- type.
local count = tonumber(ARGV[2])
local valueCap, outputCap = tonumber(ARGV[3]), tonumber(ARGV[4])
local nameCap, fieldsCap = tonumber(ARGV[5]), tonumber(ARGV[6])
local budget, keepOutput = tonumber(ARGV[7]), tonumber(ARGV[8])
-- dec is decimal string s (> 0) less one, exact at any size (a Lua
-- number is not, past 2^53).
local function dec(s)
  local d = {}
  for k = 1, #s do d[k] = string.byte(s, k) - 48 end
  local i = #d
  while d[i] == 0 do d[i] = 9; i = i - 1 end
  d[i] = d[i] - 1
  local r = string.gsub(string.char(unpack((function() local c = {} for k = 1, #d do c[k] = d[k] + 48 end return c end)())), '^0+', '')
  if r == '' then r = '0' end
  return r
end
local page, used, done = {}, 0, false
local nextEnd = ARGV[1]
-- Without a budget, one XREVRANGE; with one, a few entries at a time.
local chunk = count
if budget > 0 then chunk = 8 end
while not done and #page < count do
  local entries = redis.call('XREVRANGE', KEYS[1], nextEnd, '-', 'COUNT', math.min(chunk, count - #page))
  if #entries == 0 then break end
  for _, e in ipairs(entries) do
    local kv, out, cut, dropped = e[2], {}, {}, 0
    for i = 1, #kv, 2 do
      local name, value = kv[i], kv[i + 1]
      if #name > nameCap or #out >= 2 * fieldsCap then
        dropped = dropped + 1
      elseif name ~= 'output' or #page < keepOutput then
        local limit = valueCap
        if name == 'output' then limit = outputCap end
        if #value > limit then
          cut[#cut + 1] = name .. ' of ' .. #value .. ' bytes'
          if name == 'output' then
            value = string.sub(value, -limit)
          else
            value = string.sub(value, 1, limit)
          end
        end
        out[#out + 1] = name
        out[#out + 1] = value
        used = used + #value
      end
    end
    if dropped > 0 then
      cut[#cut + 1] = dropped .. ' fields (names over ' .. nameCap .. ' bytes, or past ' .. fieldsCap .. ')'
    end
    if #cut > 0 then
      out[#out + 1] = 'cut'
      out[#out + 1] = table.concat(cut, ', ')
    end
    page[#page + 1] = {e[1], out}
    if budget > 0 and used >= budget then
      done = true
      break
    end
  end
  if #entries < chunk then break end
  -- The next chunk ends below the last entry read: its id, less one.
  local ms, seq = string.match(entries[#entries][1], '^(%d+)-(%d+)$')
  if not ms then break end
  if string.match(seq, '[1-9]') then
    nextEnd = ms .. '-' .. dec(seq)
  elseif string.match(ms, '[1-9]') then
    nextEnd = dec(ms) .. '-18446744073709551615'
  else
    break
  end
end
return page
