-- A new record, unless its uuid has one already, and its deadline indexed.
-- KEYS: instances, deadlines. ARGV: uuid, the record's JSON, its deadline
-- (as text; '' for none). Returns 1 when created, 0 when it existed
-- (nothing written).

if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) end
return 1
