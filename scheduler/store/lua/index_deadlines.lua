-- Index the deadlines of records written before the index existed (one
-- page of them; the caller walks the instances hash with HSCAN). KEYS:
-- deadlines, instances. ARGV: the uuids of the page's records that have a
-- deadline. Each is re-read here, so a record changed since the page was
-- read is indexed as it is now; one indexed already is left as it is.
-- Returns how many were added.

local added = 0
for _, uuid in ipairs(ARGV) do
  local raw = redis.call('HGET', KEYS[2], uuid)
  if raw and not redis.call('ZSCORE', KEYS[1], uuid) then
    local ok, record = pcall(cjson.decode, raw)
    if ok and type(record) == 'table' and type(record.deadline) == 'number' then
      index_deadline(KEYS[1], uuid, record)
      added = added + 1
    end
  end
end
return added
