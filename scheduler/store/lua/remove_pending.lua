-- Drop a request's entry from the pending index.
-- KEYS: pending, pending_members. ARGV: uuid. Returns 1 if it had one, else 0.

local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old then return 0 end
redis.call('ZREM', KEYS[1], old)
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
