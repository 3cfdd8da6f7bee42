-- A host says the VM of a DELETING instance is gone there. Once no host is
-- pending (or with force), in one step: the instance's and its migration's
-- allocations are released (their group memberships end with them), the
-- record is DELETED and moves from ``instances`` to its ``deleted:<uuid>``
-- key, which expires after the retention, and leaves the deadline index.
-- KEYS: changes, providers, consumers, groups, instances, the instance's
-- ``deleted:<uuid>`` key, deadlines. ARGV: maxlen, uuid, host ('' for none), '1' to
-- force, retention in ms, now. Returns the record's JSON as it now is, or nil
-- when it is neither DELETING nor DELETED (nothing written).

local raw, tomb, missing = find_record(KEYS[5], KEYS[6], ARGV[2])
if missing then return missing end
if tomb then return tomb end
local record = cjson.decode(raw)
if record.state ~= 'DELETING' then return false end
local pending = {}
if type(record.pending_hosts) == 'table' then
  for _, h in ipairs(record.pending_hosts) do
    if h ~= ARGV[3] then pending[#pending + 1] = h end
  end
end
if #pending > 0 and ARGV[4] ~= '1' then
  record.pending_hosts = pending
  local data = encode_record(record)
  redis.call('HSET', KEYS[5], ARGV[2], data)
  index_deadline(KEYS[7], ARGV[2], record)
  return data
end
release_consumer(ARGV[2])
if type(record.migration_uuid) == 'string' then release_consumer(record.migration_uuid) end
record.state = 'DELETED'
record.task_state = cjson.null
record.deadline = cjson.null
record.pending_hosts = {}
record.updated_at = tonumber(ARGV[6])
local data = encode_record(record)
redis.call('HDEL', KEYS[5], ARGV[2])
redis.call('ZREM', KEYS[7], ARGV[2])
redis.call('SET', KEYS[6], data, 'PX', ARGV[5])
return data
