-- For release and renew: mine() reads the lock key (KEYS[1]) and tells
-- whether it holds our token (ARGV[1]): true; or false and the reply to
-- give, 0 (the key is missing or holds another token) or deny's error (GET
-- failed).
local function mine()
  local cur = redis.pcall('GET', KEYS[1])
  if type(cur) ~= 'string' then
    if cur then return false, deny(cur, 'GET', KEYS[1]) end
    return false, 0
  end
  local n = #ARGV[1]
  return string.sub(cur, 1, n) == ARGV[1] and string.byte(cur, n + 1) == 10, 0
end
