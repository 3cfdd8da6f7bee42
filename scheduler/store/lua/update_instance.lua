-- KEYS: instances, the instance's ``deleted:<uuid>`` key, deadlines. ARGV: uuid,
-- expected states (JSON list, or '' for any), changes (JSON object of
-- top-level fields; ``request_spec`` is itself a JSON string), expected
-- fields (JSON object of field -> value, null for none; '' for no such
-- check). Returns the new record's JSON, or nil when the state was not one of
-- those expected, a field not as expected, or the record is DELETED (a
-- deleted record is never changed; nothing written).
-- The record's entry in the deadline index follows its new deadline.

local raw, tomb, missing = find_record(KEYS[1], KEYS[2], ARGV[1])
if missing then return missing end
if tomb then return false end
local record = cjson.decode(raw)
if ARGV[2] ~= '' then
  local expected = false
  for _, state in ipairs(cjson.decode(ARGV[2])) do
    if record.state == state then expected = true end
  end
  if not expected then return false end
end
if ARGV[4] ~= '' and fields_differ(record, cjson.decode(ARGV[4])) then return false end
for field, value in pairs(cjson.decode(ARGV[3])) do record[field] = value end
local data = encode_record(record)
redis.call('HSET', KEYS[1], ARGV[1], data)
index_deadline(KEYS[3], ARGV[1], record)
return data
