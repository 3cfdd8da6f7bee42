-- Index a request waiting for capacity, replacing the entry it had.
-- KEYS: pending, pending_members. ARGV: uuid, its member (pending_member).

local old = redis.call('HGET', KEYS[2], ARGV[1])
if old and old ~= ARGV[2] then redis.call('ZREM', KEYS[1], old) end
redis.call('ZADD', KEYS[1], 0, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
