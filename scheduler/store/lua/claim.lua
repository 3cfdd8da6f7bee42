-- KEYS: changes, providers, consumers, groups, the consumer's delete fence
-- (``deleted:<uuid>``: while it exists, nothing is claimed for the uuid)
-- [, instances, deadlines, preemptions (the log of the last ones), each
-- victim's delete fence in the victims' order: a preempting claim's].
-- ARGV: maxlen, consumer uuid, allocations JSON ({rp: {rc: amount}}), project,
-- user, group uuid ('' for none), policy, host, max_server_per_host, the
-- consumer holding the claimant's own membership ('' for none: see
-- ``GroupClaim.own_consumer``) [, the victims JSON ([{uuid, allocations,
-- host, updated_at}]), the claimant's priority, the eviction's record fields
-- ({preemptor: fields, victims: [fields, in the victims' order]}), the
-- log's entry (``Eviction.entry``) and how many entries the log keeps: a
-- preempting claim's]. Returns 1 when claimed, 0 when the consumer already
-- holds exactly this. A preempting claim checks the claimant's record
-- (``Eviction.unmatched``) and every victim (``Victim.unmatched``, its
-- rule ``eviction_refused``): RecordChanged; drops their allocations and
-- memberships, and checks the claim against what is left; every check is
-- made before the first write. It then fences each victim (DELETING, as
-- start_delete does), writes the claimant's record (``Eviction``) and pushes
-- the entry on the log of preemptions, trimmed to its length.

local consumer = ARGV[2]
local allocations = cjson.decode(ARGV[3])

local function covers(a, b)
  for rp, amounts in pairs(a) do
    local other = b[rp]
    if type(other) ~= 'table' then return false end
    for rc, amount in pairs(amounts) do
      if other[rc] ~= amount then return false end
    end
  end
  return true
end

if redis.call('EXISTS', KEYS[5]) == 1 then
  return fail('ConsumerDeleted', {consumer = consumer})
end

local held = redis.call('HGET', KEYS[3], consumer)
if held then
  local old = cjson.decode(held).allocations
  if covers(old, allocations) and covers(allocations, old) then return 0 end
  return fail('ConsumerConflict', {consumer = consumer})
end

-- The victims: each as read, then what is left once they are gone.
local providers = {}
local leaving = {}
local evicted = {}
local preemptor
if KEYS[6] then
  local priority = tonumber(ARGV[12])
  local raw = redis.call('HGET', KEYS[6], consumer)
  preemptor = raw and cjson.decode(raw)
  local why
  if not preemptor then
    why = 'no instance record'
  elseif preemptor.state ~= '@{preemptor_state}' then
    why = 'instance is ' .. tostring(preemptor.state)
  end
  if why then return fail('RecordChanged', {uuid = consumer, why = why}) end
  for _, v in ipairs(cjson.decode(ARGV[11])) do
    local why
    local raw = redis.call('HGET', KEYS[6], v.uuid)
    local record = raw and cjson.decode(raw)
    local had = redis.call('HGET', KEYS[3], v.uuid)
    local c = had and cjson.decode(had)
    if not record then
      why = 'no instance record'
    elseif record.state ~= '@{victim_state}' then
      why = 'instance is ' .. tostring(record.state)
    elseif (record.task_state ~= nil and record.task_state ~= cjson.null)
        or record.host == nil or record.host == cjson.null then
      why = 'the record moved on'
    elseif record.preemptible ~= true or (tonumber(record.priority) or 0) >= priority then
      why = 'not preemptible by priority ' .. ARGV[12]
    elseif record.host ~= v.host or record.updated_at ~= v.updated_at then
      why = 'the record moved on'
    elseif not (c and covers(c.allocations, v.allocations) and covers(v.allocations, c.allocations)) then
      why = 'its allocation changed'
    end
    if why then return fail('RecordChanged', {uuid = v.uuid, why = why}) end
    for _, rp in ipairs(sorted_keys(c.allocations)) do
      local p = providers[rp] or cjson.decode(redis.call('HGET', KEYS[2], rp))
      for rc, amount in pairs(c.allocations[rp]) do
        local left = (p.usages[rc] or 0) - amount
        if left > 0 then p.usages[rc] = left else p.usages[rc] = nil end
      end
      p.consumers = math.max(p.consumers - 1, 0)
      providers[rp] = p
    end
    leaving[#leaving + 1] = c
    evicted[#evicted + 1] = record
  end
end

local rps = sorted_keys(allocations)
for _, rp in ipairs(rps) do
  local p = providers[rp]
  if not p then
    local raw = redis.call('HGET', KEYS[2], rp)
    if not raw then return fail('ProviderNotFound', {ident = rp}) end
    p = cjson.decode(raw)
  end
  local inventories = cjson.decode(p.inventories)
  for _, rc in ipairs(sorted_keys(allocations[rp])) do
    local amount = allocations[rp][rc]
    local inv = inventories[rc]
    if not inv then return fail('NoSuchInventory', {uuid = rp, rc = rc}) end
    local max_unit = inv.max_unit  -- null: the total
    if type(max_unit) ~= 'number' or max_unit > inv.total then max_unit = inv.total end
    local rule, limit
    if amount < inv.min_unit then
      rule, limit = 'min_unit', inv.min_unit
    elseif amount > max_unit then
      rule, limit = 'max_unit', max_unit
    elseif amount % inv.step_size ~= 0 then
      rule, limit = 'step_size', inv.step_size
    end
    if rule then
      return fail('UnitRuleViolation',
                  {uuid = rp, rc = rc, requested = amount, rule = rule, limit = limit})
    end
    -- int() in Python truncates toward zero; so does this.
    local capacity = (inv.total - inv.reserved) * inv.allocation_ratio
    capacity = capacity >= 0 and math.floor(capacity) or math.ceil(capacity)
    local free = capacity - (p.usages[rc] or 0)
    if amount > free then
      return fail('CapacityExceeded', {uuid = rp, rc = rc, requested = amount, free = free})
    end
  end
  providers[rp] = p
end

local group, policy, host = ARGV[6], ARGV[7], ARGV[8]
local members
if group ~= '' then
  local raw = redis.call('HGET', KEYS[4], group)
  members = raw and cjson.decode(raw) or {}
  for _, c in ipairs(leaving) do
    if c.group_uuid == group then
      local left = (members[c.host] or 0) - 1
      if left > 0 then members[c.host] = left else members[c.host] = nil end
    end
  end
  local here = members[host] or 0
  -- The claimant's own membership on this host is not held against it.
  local own = 0
  local own_raw = ARGV[10] ~= '' and redis.call('HGET', KEYS[3], ARGV[10])
  if own_raw then
    local c = cjson.decode(own_raw)
    if c.group_uuid == group and c.host == host then own = 1 end
  end
  if (policy == 'anti-affinity' and here - own >= tonumber(ARGV[9]))
      or (policy == 'affinity' and here == 0 and next(members) ~= nil) then
    return fail('GroupPolicyViolation', {group = group, policy = policy, host = host})
  end
end

-- Every check is made: write.
for _, c in ipairs(leaving) do
  redis.call('HDEL', KEYS[3], c.uuid)
  if type(c.group_uuid) == 'string' and c.group_uuid ~= group then
    leave_group(KEYS[4], c.group_uuid, c.host)
  end
end
if group ~= '' then
  members[host] = (members[host] or 0) + 1
  redis.call('HSET', KEYS[4], group, cjson.encode(members))
end
for _, rp in ipairs(rps) do
  local p = providers[rp]
  for rc, amount in pairs(allocations[rp]) do
    p.usages[rc] = (p.usages[rc] or 0) + amount
  end
  p.consumers = p.consumers + 1
end
for _, rp in ipairs(sorted_keys(providers)) do
  local p = providers[rp]
  p.generation = p.generation + 1
  save_usage(KEYS[2], rp, p)
end
save_consumer(consumer, allocations, group, host)
if preemptor then
  local eviction = cjson.decode(ARGV[13])
  for n, record in ipairs(evicted) do
    for field, value in pairs(eviction.victims[n]) do record[field] = value end
    record.state = 'DELETING'
    redis.call('HSET', KEYS[6], record.uuid, encode_record(record))
    index_deadline(KEYS[7], record.uuid, record)
    redis.call('SET', KEYS[8 + n], '@{deleting_marker}')
  end
  for field, value in pairs(eviction.preemptor) do preemptor[field] = value end
  redis.call('HSET', KEYS[6], consumer, encode_record(preemptor))
  index_deadline(KEYS[7], consumer, preemptor)
  redis.call('LPUSH', KEYS[8], ARGV[14])
  redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[15]) - 1)
end
return 1
