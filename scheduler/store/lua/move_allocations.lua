-- Hand one consumer's allocations to another (a resize parks the instance's
-- allocation on its migration consumer; a revert hands it back).
-- KEYS: changes, providers, consumers, groups [, instances, the instance's
-- deleted key]. ARGV: maxlen, source uuid, target uuid, '1' to drop what the
-- target holds first (else a target that holds anything is a
-- ConsumerConflict) [, the record check's uuid, states, expected fields].
-- Returns 1 when moved, 0 when the source held nothing (nothing written: a
-- repeated move is a no-op); with a check the record fails, RecordChanged.

local source_raw = redis.call('HGET', KEYS[3], ARGV[2])
if not source_raw then return 0 end
local target_raw = redis.call('HGET', KEYS[3], ARGV[3])
if target_raw and ARGV[4] ~= '1' then
  return fail('ConsumerConflict', {consumer = ARGV[3]})
end
local source = cjson.decode(source_raw)
local touched = {}
local function provider(rp)
  if not touched[rp] then touched[rp] = cjson.decode(redis.call('HGET', KEYS[2], rp)) end
  return touched[rp]
end
if target_raw then
  local target = cjson.decode(target_raw)
  for rp, amounts in pairs(target.allocations) do
    local p = provider(rp)
    for rc, amount in pairs(amounts) do
      local left = (p.usages[rc] or 0) - amount
      if left > 0 then p.usages[rc] = left else p.usages[rc] = nil end
    end
    p.consumers = math.max(p.consumers - 1, 0)
  end
  if target.group_uuid then leave_group(KEYS[4], target.group_uuid, target.host) end
end
for rp in pairs(source.allocations) do provider(rp) end
for _, rp in ipairs(sorted_keys(touched)) do
  local p = touched[rp]
  p.generation = p.generation + 1
  save_usage(KEYS[2], rp, p)
end
source.uuid = ARGV[3]
source.generation = 1
redis.call('HSET', KEYS[3], ARGV[3], cjson.encode(source))
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
