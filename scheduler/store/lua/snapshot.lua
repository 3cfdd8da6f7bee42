-- KEYS: changes. Returns the cursor a cold load starts from: the stream's
-- last-generated id ('0-0' while there is no stream), the id CHANGES reads
-- after. The hashes are then read in HSCAN pages, by the caller, not here
-- (see ``RedisStore.compact_snapshot``): one script reading them whole would
-- hold Redis for as long as the cloud is big.

if redis.call('EXISTS', KEYS[1]) == 0 then return '0-0' end
return stream_info(KEYS[1])['last-generated-id']
