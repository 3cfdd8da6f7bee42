-- KEYS: changes, aggregates. ARGV: maxlen, uuid, aggregate JSON.

redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
feed('aggregate', ARGV[3])
return 1
