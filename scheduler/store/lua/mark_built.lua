-- KEYS: instances, the instance's ``deleted:<uuid>`` key, deadlines,
-- consumers, provider_names. ARGV: uuid, host, changes (JSON object of
-- top-level fields). A build's result in one round trip: if the record is
-- BUILDING and the instance's consumer holds an allocation on the host's
-- provider, apply the changes and count the attempt (attempts + 1). Returns
-- {outcome, record JSON or ''}: '@{built}' (the new record), '@{stale}'
-- (BUILDING, its claim not on that host), '@{no_record}' or '@{not_building}'
-- (the record as read); nothing is written but for '@{built}'.

local raw, tomb, missing = find_record(KEYS[1], KEYS[2], ARGV[1])
if missing then return {'@{no_record}', ''} end
if tomb then return {'@{not_building}', tomb} end
local record = cjson.decode(raw)
if record.state ~= '@{building}' then return {'@{not_building}', raw} end
local provider = redis.call('HGET', KEYS[5], ARGV[2])
local consumer = provider and redis.call('HGET', KEYS[4], ARGV[1])
local allocations = consumer and cjson.decode(consumer).allocations
if type(allocations) ~= 'table' or allocations[provider] == nil then
  return {'@{stale}', raw}
end
for field, value in pairs(cjson.decode(ARGV[3])) do record[field] = value end
record.attempts = (tonumber(record.attempts) or 0) + 1
local data = encode_record(record)
redis.call('HSET', KEYS[1], ARGV[1], data)
index_deadline(KEYS[3], ARGV[1], record)
return {'@{built}', data}
