-- Write the allocation of a consumer that holds none, with no unit check and,
-- unless ARGV[11] is '0', no capacity check (the reconciler accounts for a VM
-- a compute really runs: it is there whether it fits or not). KEYS: changes,
-- providers, consumers, groups, the consumer's delete fence. ARGV: as for
-- CLAIM (the policy, its limit and the own consumer unused: no policy is
-- checked), then '1' to write past capacity or '0' to refuse that
-- (CapacityExceeded, nothing written). Returns 1 when some provider is now
-- past its capacity, else 0.

local consumer = ARGV[2]
local allocations = cjson.decode(ARGV[3])
if redis.call('EXISTS', KEYS[5]) == 1 then
  return fail('ConsumerDeleted', {consumer = consumer})
end
if redis.call('HEXISTS', KEYS[3], consumer) == 1 then
  return fail('ConsumerConflict', {consumer = consumer})
end
local rps = sorted_keys(allocations)
local providers = {}
local over = 0
for _, rp in ipairs(rps) do
  local raw = redis.call('HGET', KEYS[2], rp)
  if not raw then return fail('ProviderNotFound', {ident = rp}) end
  local p = cjson.decode(raw)
  p.inv = cjson.decode(p.inventories)
  for _, rc in ipairs(sorted_keys(allocations[rp])) do
    local inv = p.inv[rc]
    if not inv then return fail('NoSuchInventory', {uuid = rp, rc = rc}) end
    local amount = allocations[rp][rc]
    local capacity = (inv.total - inv.reserved) * inv.allocation_ratio
    capacity = capacity >= 0 and math.floor(capacity) or math.ceil(capacity)
    local free = capacity - (p.usages[rc] or 0)
    if amount > free then
      if ARGV[11] == '0' then
        return fail('CapacityExceeded', {uuid = rp, rc = rc, requested = amount, free = free})
      end
      over = 1
    end
  end
  providers[rp] = p
end
for _, rp in ipairs(rps) do
  local p = providers[rp]
  for rc, amount in pairs(allocations[rp]) do
    p.usages[rc] = (p.usages[rc] or 0) + amount
  end
  p.inv = nil
  p.consumers = p.consumers + 1
  p.generation = p.generation + 1
  save_usage(KEYS[2], rp, p)
end
local group, host = ARGV[6], ARGV[8]
if group ~= '' then
  local raw = redis.call('HGET', KEYS[4], group)
  local members = raw and cjson.decode(raw) or {}
  members[host] = (members[host] or 0) + 1
  redis.call('HSET', KEYS[4], group, cjson.encode(members))
end
save_consumer(consumer, allocations, group, host)
return over
