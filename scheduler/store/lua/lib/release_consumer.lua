-- Drop a consumer's allocations and its group membership (KEYS[2..4]:
-- providers, consumers, groups); 1 if it held any, else 0.

local function release_consumer(uuid)
  local held = redis.call('HGET', KEYS[3], uuid)
  if not held then return 0 end
  local c = cjson.decode(held)
  for _, rp in ipairs(sorted_keys(c.allocations)) do
    local p = cjson.decode(redis.call('HGET', KEYS[2], rp))
    for rc, amount in pairs(c.allocations[rp]) do
      local left = (p.usages[rc] or 0) - amount
      if left > 0 then p.usages[rc] = left else p.usages[rc] = nil end
    end
    p.consumers = math.max(p.consumers - 1, 0)
    p.generation = p.generation + 1
    save_usage(KEYS[2], rp, p)
  end
  if type(c.group_uuid) == 'string' then leave_group(KEYS[4], c.group_uuid, c.host) end
  redis.call('HDEL', KEYS[3], uuid)
  return 1
end
