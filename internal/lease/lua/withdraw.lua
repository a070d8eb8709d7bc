-- withdraw takes a candidate out of the candidates.
--
--   KEYS[1] candidates, KEYS[2] their leases
--   ARGV[1] value
--
-- Replies the number of entries removed.
return guard(function()
return call('ZREM', KEYS[1], ARGV[1]) + call('ZREM', KEYS[2], ARGV[1])
end)
