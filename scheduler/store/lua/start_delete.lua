-- Start a delete: the record goes DELETING (with ``changes``) and the
-- instance's fence is set, in one step, so no claim for it can land after.
-- KEYS: instances, the instance's ``deleted:<uuid>`` key, deadlines. ARGV:
-- uuid, changes (JSON object). Returns {1, the new record} when started, {0,
-- the record} when it was DELETING or DELETED already (nothing written).

local raw, tomb, missing = find_record(KEYS[1], KEYS[2], ARGV[1])
if missing then return missing end
if tomb then return {0, tomb} end
local record = cjson.decode(raw)
if record.state == 'DELETING' or record.state == 'DELETED' then return {0, raw} end
for field, value in pairs(cjson.decode(ARGV[2])) do record[field] = value end
record.state = 'DELETING'
local data = encode_record(record)
redis.call('HSET', KEYS[1], ARGV[1], data)
index_deadline(KEYS[3], ARGV[1], record)
redis.call('SET', KEYS[2], '@{deleting_marker}')
return {1, data}
