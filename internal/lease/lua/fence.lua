-- fenceOf(raw, key) returns the fence that raw, the value of the fence key
-- key, holds, or nil and an error reply, written nowhere, when it holds
-- anything else (someone else wrote it): fences must not go backwards, so a
-- foreign value is neither reset nor touched. A fence is an integer in
-- [0, 2^53-1), exact in Lua's doubles.
--
-- readFence(key) reads the fence key: its fence (fenceOf), nil when the
-- key does not exist, or nil and an error reply when GET fails (deny).
local function fenceOf(raw, key)
  local f = tonumber(raw)
  if not f or f < 0 or f >= 9007199254740991 or f % 1 ~= 0 then
    return nil, redis.error_reply('ERR redisleader: fence key ' .. key .. ' does not hold a fence (an integer in [0, 2^53-1)); it was left unchanged')
  end
  return f
end
local function readFence(key)
  local raw = redis.pcall('GET', key)
  if not raw then return nil end
  if type(raw) == 'table' then return nil, deny(raw, 'GET', key) end
  return fenceOf(raw, key)
end
