-- The conductor's pending set: what is due, read from the deadline index.
-- KEYS: deadlines, instances. ARGV: now, limit. Returns {the records whose
-- deadline is not after ``now``, earliest first (ties by uuid), at most
-- ``limit``, flat as (uuid, JSON) pairs; the uuids of values that are not a
-- JSON object; 1 if the index is complete (it holds ``INDEX_COMPLETE``),
-- else 0}. It reads only the entries due (O(log n + due)), whatever the
-- number of records. An entry out of step with its record (none, no
-- deadline, a later one: a value written around the scripts) is put right
-- (dropped or re-scored) and not returned; a value that is not a JSON object
-- is named once and dropped from the index, never fails the sweep.

local limit = tonumber(ARGV[2])
local now = tonumber(ARGV[1])
local complete = redis.call('ZSCORE', KEYS[1], '@{index_complete}') and 1 or 0
local uuids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, limit)
local out, unreadable = {}, {}
for first = 1, #uuids, 500 do  -- HMGET in chunks: unpack is bounded by Lua's stack
  local chunk = {}
  for i = first, math.min(first + 499, #uuids) do chunk[#chunk + 1] = uuids[i] end
  local raws = redis.call('HMGET', KEYS[2], unpack(chunk))
  for i, uuid in ipairs(chunk) do
    local raw = raws[i]
    local ok, record = false, nil
    if raw then ok, record = pcall(cjson.decode, raw) end
    if not raw then
      redis.call('ZREM', KEYS[1], uuid)
    elseif not ok or type(record) ~= 'table' then
      unreadable[#unreadable + 1] = uuid
      redis.call('ZREM', KEYS[1], uuid)
    elseif type(record.deadline) ~= 'number' then
      redis.call('ZREM', KEYS[1], uuid)
    elseif record.deadline > now then
      redis.call('ZADD', KEYS[1], string.format('%.17g', record.deadline), uuid)
    else
      out[#out + 1] = uuid
      out[#out + 1] = raw
    end
  end
end
return {out, unreadable, complete}
