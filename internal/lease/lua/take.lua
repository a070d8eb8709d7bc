-- For the acquire scripts, after fence.lua:
--
-- take(t, over, now) takes the free lock (over: the reservation for us
-- that it holds, see heir) for ARGV[1] (token) with ARGV[3] (value) and
-- ARGV[2] (TTL in ms), given TIME's reply t (and now, t in us, if known),
-- and returns its fence, or nil and an error reply, written nowhere, when
-- the fence key (KEYS[2]) does not hold a fence or a command fails (deny).
-- The fence is max(stored + 1, server TIME in us); when it is TIME's, its
-- decimal is TIME's two strings joined (the us padded to six digits),
-- sparing a number's formatting, and a stored fence of plain digits is
-- compared with it as a string (shorter, or as long and before it), sparing
-- tonumber of a 16-digit decimal (strtod's slow path); anything else goes
-- through fenceOf. The key expires at expiresAt(now): now in ms plus the
-- TTL, so that its expiry is known from t exactly (Redis would otherwise
-- count PX from the start of the script, a little before TIME; Redlock
-- relies on this, see quorum.acquire); a number, which redis.pcall writes
-- with 17 digits.
-- Order: GET and validate the fence key, PUBLISH "A" on the name's
-- channel, SET the fence key, SET the lock key (KEYS[1]) NX PXAT (over:
-- XX PXAT).
--
-- heir(v) tells whether a lock value v is a transfer's reservation,
-- "\n<fence>\n<value>", for our value.
local function expiresAt(now)
  return math.floor(now / 1000) + ARGV[2]
end
local function take(t, over, now)
  now = now or t[1] * 1000000 + t[2]
  local fence, fs = now, t[1] .. string.sub('00000', #t[2]) .. t[2]
  local raw = redis.pcall('GET', KEYS[2])
  if type(raw) == 'table' then return nil, deny(raw, 'GET', KEYS[2]) end
  if raw and not (string.find(raw, '^[1-9]%d*$') and (#raw < #fs or #raw == #fs and raw < fs)) then
    local stored, err = fenceOf(raw, KEYS[2])
    if err then return nil, err end
    if stored >= now then
      fence = stored + 1
      fs = string.format('%.0f', fence)
    end
  end
  local ch = KEYS[1] .. ':ch'
  local r = redis.pcall('PUBLISH', ch, 'A')
  if type(r) == 'table' then return nil, deny(r, 'PUBLISH', ch) end
  r = redis.pcall('SET', KEYS[2], fs)
  if r.err then return nil, deny(r, 'SET', KEYS[2]) end
  r = redis.pcall('SET', KEYS[1], ARGV[1] .. '\n' .. fs .. '\n' .. ARGV[3], over and 'XX' or 'NX', 'PXAT', expiresAt(now))
  if r and r.err then return nil, deny(r, 'SET', KEYS[1]) end
  return fence
end
local function heir(v)
  if not v or ARGV[3] == '' or string.byte(v) ~= 10 then return false end
  local nl = string.find(v, '\n', 2, true)
  return nl ~= nil and string.sub(v, nl + 1) == ARGV[3]
end
