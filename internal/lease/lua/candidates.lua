-- candidates reads the live candidates, best first.
--
--   KEYS[1] candidates, KEYS[2] their leases
--
-- Replies {value, priority, ...} for up to 100 live candidates. It writes
-- nothing.
return guard(function()
candidateKeys(KEYS[1], KEYS[2])
local now = nowMs(call('TIME'))
local c = call('ZRANGE', KEYS[1], 0, 99, 'REV', 'WITHSCORES')
local out = {}
for i = 1, #c, 2 do
  if live(call('ZSCORE', KEYS[2], c[i]), now) then
    out[#out + 1] = c[i]
    out[#out + 1] = string.format('%.0f', tonumber(c[i + 1]))
  end
end
return out
end)
