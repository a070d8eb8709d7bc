-- Stores a transfer request, replacing any other, and hints the leader on
-- the key's own channel (pub/sub is a hint: the leader reads the key).
--
-- KEYS[1] the request key; ARGV[1] the request ("<id> <fence>\n<value>"),
-- ARGV[2] its TTL in ms. Replies 1.
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', KEYS[1], 'T')
return 1
