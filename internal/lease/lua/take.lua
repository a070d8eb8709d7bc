-- For the acquire scripts, after fence.lua:
--
-- take(t, over) takes the free lock (over: the reservation for us that it
-- holds, see heir) for ARGV[1] (token) with ARGV[3] (value) and ARGV[2]
-- (TTL in ms), given TIME's reply t, and returns its fence, or nil and an
-- error reply, written nowhere, when the fence key (KEYS[2]) does not hold
-- a fence. The fence is max(stored + 1, server TIME in us); when it is
-- TIME's, its decimal is TIME's two strings joined (the us padded to six
-- digits), sparing string.format. The key expires at expiresAt(t): t in ms
-- plus the TTL, so that its expiry is known from t exactly (Redis would
-- otherwise count PX from the start of the script, a little before TIME;
-- Redlock relies on this, see quorum.acquire). Order: GET and validate the
-- fence key, PUBLISH "A" on the name's channel, SET the fence key, SET the
-- lock key (KEYS[1]) NX PXAT (over: PXAT).
--
-- heir(v) tells whether a lock value v is a transfer's reservation,
-- "\n<fence>\n<value>", for our value.
local function expiresAt(t)
  return string.format('%.0f', nowMs(t) + tonumber(ARGV[2]))
end
local function take(t, over)
  local fence = t[1] * 1000000 + t[2]
  local stored, err = readFence(KEYS[2])
  if err then return nil, err end
  local fs
  if stored and stored >= fence then
    fence = stored + 1
    fs = string.format('%.0f', fence)
  else
    fs = t[1] .. string.sub('00000', #t[2]) .. t[2]
  end
  call('PUBLISH', KEYS[1] .. ':ch', 'A')
  call('SET', KEYS[2], fs)
  if over then
    call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'PXAT', expiresAt(t))
  else
    call('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], 'NX', 'PXAT', expiresAt(t))
  end
  return fence
end
local function heir(v)
  if not v or ARGV[3] == '' or string.sub(v, 1, 1) ~= '\n' then return false end
  local nl = string.find(v, '\n', 2, true)
  return nl ~= nil and string.sub(v, nl + 1) == ARGV[3]
end
