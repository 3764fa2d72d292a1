-- history_read.lua: read a page of a task's history stream, newest first,
-- as XREVRANGE end - COUNT n does, with every entry bounded whoever wrote
-- it: a value longer than its cap is cut (the tail of "output", the head of
-- any other field), a field name longer than the name cap and the fields
-- past the count cap are left out, and the entry gets a field "cut" that
-- says what was cut and how large it was. slotd's own appends are within
-- the caps; a larger entry was planted, and a reply holds at most
-- COUNT × (fields cap × value cap + output cap) bytes of values.
--
-- KEYS[1]  the stream (HistoryKey)
-- ARGV[1]  end id, inclusive ("+": the newest)
-- ARGV[2]  COUNT
-- ARGV[3]  cap of a value other than "output", in bytes
-- ARGV[4]  cap of the "output" value, in bytes
-- ARGV[5]  cap of a field name, in bytes
-- ARGV[6]  cap of the fields of one entry
--
-- Returns XREVRANGE's reply: {{id, {field, value, ...}}, ...}; an empty
-- array if the stream does not exist; an error reply for a key of another
-- type.
local valueCap, outputCap = tonumber(ARGV[3]), tonumber(ARGV[4])
local nameCap, fieldsCap = tonumber(ARGV[5]), tonumber(ARGV[6])
local entries = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])
for _, e in ipairs(entries) do
  local kv, out, cut, dropped = e[2], {}, {}, 0
  for i = 1, #kv, 2 do
    local name, value = kv[i], kv[i + 1]
    if #name > nameCap or #out >= 2 * fieldsCap then
      dropped = dropped + 1
    else
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
    end
  end
  if dropped > 0 then
    cut[#cut + 1] = dropped .. ' fields (names over ' .. nameCap .. ' bytes, or past ' .. fieldsCap .. ')'
  end
  if #cut > 0 then
    out[#out + 1] = 'cut'
    out[#out + 1] = table.concat(cut, ', ')
  end
  e[2] = out
end
return entries
