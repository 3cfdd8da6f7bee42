"""Every Lua script of the Redis store, one module constant each.

Each write that must be atomic is one script, so it runs whole with nothing
interleaved. Scripts make every check before their first write: a refusal
returns an error reply and leaves nothing behind (Redis does not roll a
script back). Every script that changes providers, usages, aggregates or
service state appends to the change stream in the same script.

Conventions, relied on by :mod:`scheduler.store.redis_store`:

* A writing script gets the change stream as ``KEYS[1]`` and the stream's
  approximate maximum length as ``ARGV[1]``.
* A refusal is an error reply ``SCHEDULER <Code> <JSON fields>``, where
  ``<Code>`` names the exception class and the fields are its arguments
  (``ServiceNotFound`` is the one code without a class of its own).
* Redis's cjson writes numbers with 14 significant digits (and an empty list
  as ``{}``): exact for the integers it rewrites here (generations, usages,
  counts), not for floats. So a provider's inventories, which carry
  allocation ratios, are kept as JSON text inside the provider's JSON and
  never re-encoded; and the instance script, whose records carry timestamps,
  writes numbers with 17 digits itself.

Change kinds written to the stream: ``provider`` (the whole provider JSON),
``usage`` (``uuid``, ``generation``, ``usages``, ``consumers``), ``aggregate``
and ``service`` (with the host's last heartbeat in field ``hb``).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

# --- shared Lua helpers (prepended to the scripts that use them) --------------------

_FAIL = """
local function fail(code, fields)
  return redis.error_reply('SCHEDULER ' .. code .. ' ' .. cjson.encode(fields))
end
"""

_FEED = """
local function feed(kind, data, ...)
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'k', kind, 'd', data, ...)
end
"""

_SORTED_KEYS = """
local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end
"""

_SAVE_USAGE = """
local function save_usage(providers_key, uuid, p)
  redis.call('HSET', providers_key, uuid, cjson.encode(p))
  feed('usage', cjson.encode({uuid = uuid, generation = p.generation, usages = p.usages,
                              consumers = p.consumers}))
end
"""

_SAVE_SERVICE = """
local function save_service(s)
  redis.call('HSET', KEYS[2], s.host, cjson.encode(s))
  feed('service', cjson.encode(s), 'hb', redis.call('HGET', KEYS[3], s.host) or '0')
end
"""

_SAVE_CONSUMER = """
local function save_consumer(consumer, allocations, group, host)
  redis.call('HSET', KEYS[3], consumer, cjson.encode({
    uuid = consumer, allocations = allocations, project_id = ARGV[4], user_id = ARGV[5],
    generation = 1, group_uuid = group ~= '' and group or nil,
    host = group ~= '' and host or nil}))
end
"""

_STREAM_INFO = """
local function stream_info(stream)
  local flat = redis.call('XINFO', 'STREAM', stream)
  local info = {}
  for i = 1, #flat, 2 do info[flat[i]] = flat[i + 1] end
  return info
end
"""

# --- allocations --------------------------------------------------------------------

#: KEYS: changes, providers, consumers, groups, the consumer's delete fence
#: (``deleted:<uuid>``: while it exists, nothing is claimed for the uuid).
#: ARGV: maxlen, consumer uuid, allocations JSON ({rp: {rc: amount}}), project,
#: user, group uuid ('' for none), policy, host, max_server_per_host, the
#: consumer holding the claimant's own membership ('' for none: see
#: ``GroupClaim.own_consumer``). Returns 1 when claimed, 0 when the consumer
#: already holds exactly this.
CLAIM = (
    _FAIL
    + _FEED
    + _SORTED_KEYS
    + _SAVE_USAGE
    + _SAVE_CONSUMER
    + """
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

local rps = sorted_keys(allocations)
local providers = {}
for _, rp in ipairs(rps) do
  local raw = redis.call('HGET', KEYS[2], rp)
  if not raw then return fail('ProviderNotFound', {ident = rp}) end
  local p = cjson.decode(raw)
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
if group ~= '' then
  local raw = redis.call('HGET', KEYS[4], group)
  local members = raw and cjson.decode(raw) or {}
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
  members[host] = here + 1
  redis.call('HSET', KEYS[4], group, cjson.encode(members))
end

for _, rp in ipairs(rps) do
  local p = providers[rp]
  for rc, amount in pairs(allocations[rp]) do
    p.usages[rc] = (p.usages[rc] or 0) + amount
  end
  p.consumers = p.consumers + 1
  p.generation = p.generation + 1
  save_usage(KEYS[2], rp, p)
end
save_consumer(consumer, allocations, group, host)
return 1
"""
)

_LEAVE_GROUP = """
local function leave_group(groups_key, group_uuid, host)
  local raw = redis.call('HGET', groups_key, group_uuid)
  if not raw then return end
  local members = cjson.decode(raw)
  local left = (members[host] or 0) - 1
  if left > 0 then members[host] = left else members[host] = nil end
  if next(members) == nil then
    redis.call('HDEL', groups_key, group_uuid)
  else
    redis.call('HSET', groups_key, group_uuid, cjson.encode(members))
  end
end
"""

#: The marker a ``deleted:<uuid>`` key holds while the instance is DELETING.
DELETING_MARKER = "deleting"

# An instance's record: (its live JSON, nil), or (nil, its DELETED JSON), or
# an InstanceNotFound error reply to return when it has neither.
_FIND_RECORD = (
    """
local function find_record(instances_key, deleted_key, uuid)
  local raw = redis.call('HGET', instances_key, uuid)
  if raw then return raw, nil end
  local tomb = redis.call('GET', deleted_key)
  if tomb and tomb ~= '"""
    + DELETING_MARKER
    + """' then return nil, tomb end
  return nil, nil, fail('InstanceNotFound', {ident = uuid})
end
"""
)

# Whether a record's fields differ from ``expect`` (field -> value, JSON null
# for none; a field absent from the record is none).
_FIELDS_DIFFER = """
local function fields_differ(record, expect)
  for field, want in pairs(expect) do
    local have = record[field]
    if want == cjson.null then
      if have ~= nil and have ~= cjson.null then return true end
    elseif have ~= want then
      return true
    end
  end
  return false
end
"""

# A write's record check (:class:`scheduler.store.RecordCheck`): the error to
# return (RecordChanged) when the instance's record (live, or DELETED within
# its retention) is not in one of ``states`` with ``expect``'s fields; nil
# when it is. Needs _FAIL, _FIND_RECORD and _FIELDS_DIFFER.
_CHECK_RECORD = """
local function check_record(instances_key, deleted_key, uuid, states, expect)
  local raw, tomb = find_record(instances_key, deleted_key, uuid)
  if not (raw or tomb) then
    return fail('RecordChanged', {uuid = uuid, why = 'no instance record'})
  end
  local record = cjson.decode(raw or tomb)
  local due = false
  for _, state in ipairs(cjson.decode(states)) do
    if record.state == state then due = true end
  end
  if not due then
    return fail('RecordChanged', {uuid = uuid, why = 'instance is ' .. tostring(record.state)})
  end
  if fields_differ(record, cjson.decode(expect)) then
    return fail('RecordChanged', {uuid = uuid, why = 'the record moved on'})
  end
  return nil
end
"""


# The optional record check of a write whose KEYS[1..4] are the allocation
# keys: KEYS[5], KEYS[6] the instances hash and the instance's deleted key,
# ARGV[first..first+2] its uuid, states and expected fields (absent: none).
def _checked(first: int) -> str:
    return (
        _FIND_RECORD
        + _FIELDS_DIFFER
        + _CHECK_RECORD
        + f"""
if ARGV[{first}] then
  local refused = check_record(
    KEYS[5], KEYS[6], ARGV[{first}], ARGV[{first + 1}], ARGV[{first + 2}]
  )
  if refused then return refused end
end
"""
    )


# Drop a consumer's allocations and its group membership (KEYS[2..4]:
# providers, consumers, groups); 1 if it held any, else 0.
_RELEASE_CONSUMER = (
    _SORTED_KEYS
    + _SAVE_USAGE
    + _LEAVE_GROUP
    + """
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
"""
)

#: KEYS: changes, providers, consumers, groups [, instances, the instance's
#: deleted key]. ARGV: maxlen, consumer uuid [, the record check's uuid, states,
#: expected fields]. Returns 1 if the consumer held allocations, else 0; with a
#: check the record fails, RecordChanged (nothing written).
RELEASE = _FAIL + _FEED + _RELEASE_CONSUMER + _checked(3) + "return release_consumer(ARGV[2])\n"

#: Hand one consumer's allocations to another (a resize parks the instance's
#: allocation on its migration consumer; a revert hands it back).
#: KEYS: changes, providers, consumers, groups [, instances, the instance's
#: deleted key]. ARGV: maxlen, source uuid, target uuid, '1' to drop what the
#: target holds first (else a target that holds anything is a
#: ConsumerConflict) [, the record check's uuid, states, expected fields].
#: Returns 1 when moved, 0 when the source held nothing (nothing written: a
#: repeated move is a no-op); with a check the record fails, RecordChanged.
MOVE_ALLOCATIONS = (
    _FAIL
    + _FEED
    + _SORTED_KEYS
    + _SAVE_USAGE
    + _LEAVE_GROUP
    + _checked(5)
    + """
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
"""
)

#: Write the allocation of a consumer that holds none, with no unit check and,
#: unless ARGV[11] is '0', no capacity check (the reconciler accounts for a VM
#: a compute really runs: it is there whether it fits or not). KEYS: changes,
#: providers, consumers, groups, the consumer's delete fence. ARGV: as for
#: CLAIM (the policy, its limit and the own consumer unused: no policy is
#: checked), then '1' to write past capacity or '0' to refuse that
#: (CapacityExceeded, nothing written). Returns 1 when some provider is now
#: past its capacity, else 0.
HEAL_ALLOCATION = (
    _FAIL
    + _FEED
    + _SORTED_KEYS
    + _SAVE_USAGE
    + _SAVE_CONSUMER
    + """
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
"""
)

# --- providers and aggregates -------------------------------------------------------

#: KEYS: changes, providers, provider_names. ARGV: maxlen, uuid, name, parent
#: uuid ('' for a root). Returns the new provider's JSON.
CREATE_PROVIDER = (
    _FAIL
    + _FEED
    + """
local uuid, name, parent = ARGV[2], ARGV[3], ARGV[4]
if redis.call('HEXISTS', KEYS[2], uuid) == 1 then return fail('ProviderExists', {ident = uuid}) end
if redis.call('HEXISTS', KEYS[3], name) == 1 then return fail('ProviderExists', {ident = name}) end
local root = uuid
if parent ~= '' then
  local raw = redis.call('HGET', KEYS[2], parent)
  if not raw then return fail('ProviderNotFound', {ident = parent}) end
  root = cjson.decode(raw).root_uuid
else
  parent = cjson.null
end
local data = cjson.encode({uuid = uuid, name = name, generation = 0, parent_uuid = parent,
                           root_uuid = root, inventories = '{}', usages = {}, traits = {},
                           aggregates = {}, consumers = 0})
redis.call('HSET', KEYS[2], uuid, data)
redis.call('HSET', KEYS[3], name, uuid)
feed('provider', data)
return data
"""
)

#: Replace one of a provider's ``inventories``, ``traits`` or ``aggregates``,
#: guarded by its generation. KEYS: changes, providers. ARGV: maxlen, uuid,
#: generation, field, value JSON. Returns the new generation.
UPDATE_PROVIDER = (
    _FAIL
    + _FEED
    + _SORTED_KEYS
    + """
local uuid, expected, field = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local raw = redis.call('HGET', KEYS[2], uuid)
if not raw then return fail('ProviderNotFound', {ident = uuid}) end
local p = cjson.decode(raw)
if p.generation ~= expected then
  return fail('GenerationConflict', {uuid = uuid, expected = expected, actual = p.generation})
end
local value = cjson.decode(ARGV[5])
if field == 'inventories' then
  -- usages hold only positive amounts
  for _, rc in ipairs(sorted_keys(p.usages)) do
    if value[rc] == nil then
      return fail('InventoryInUse', {uuid = uuid, rc = rc, used = p.usages[rc]})
    end
  end
  value = ARGV[5]  -- kept as text, see the module docstring
end
p[field] = value
p.generation = p.generation + 1
local data = cjson.encode(p)
redis.call('HSET', KEYS[2], uuid, data)
feed('provider', data)
return p.generation
"""
)

#: KEYS: changes, aggregates. ARGV: maxlen, uuid, aggregate JSON.
PUT_AGGREGATE = (
    _FEED
    + """
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
feed('aggregate', ARGV[3])
return 1
"""
)

# --- services -----------------------------------------------------------------------

#: KEYS: changes, services, heartbeats. ARGV: maxlen, then host, rpc_server
#: pairs. A new host starts enabled with no failed builds; a known one keeps
#: its state and only a changed rpc_server is written (and fed).
REGISTER_SERVICES = (
    _FEED
    + _SAVE_SERVICE
    + """
for i = 2, #ARGV, 2 do
  local host, rpc_server = ARGV[i], ARGV[i + 1]
  local raw = redis.call('HGET', KEYS[2], host)
  if not raw then
    save_service({host = host, rpc_server = rpc_server, disabled = false,
                  disabled_reason = cjson.null, failed_builds = 0})
  else
    local s = cjson.decode(raw)
    if s.rpc_server ~= rpc_server then
      s.rpc_server = rpc_server
      save_service(s)
    end
  end
end
return 1
"""
)

#: KEYS: changes, services, heartbeats, provider_names, providers. ARGV:
#: maxlen, host, '1' or '0', reason JSON (a string or null). In the same
#: step, the host's root provider (the provider named after it, if any) gets
#: or loses the trait COMPUTE_STATUS_DISABLED, its generation bumped, so the
#: trait and the service record never disagree. Writes (and feeds) only a
#: change; returns 1 if anything changed.
SET_SERVICE_DISABLED = (
    _FAIL
    + _FEED
    + _SAVE_SERVICE
    + """
local raw = redis.call('HGET', KEYS[2], ARGV[2])
if not raw then return fail('ServiceNotFound', {ident = ARGV[2]}) end
local s = cjson.decode(raw)
local disabled, reason = ARGV[3] == '1', cjson.decode(ARGV[4])
local changed = 0
if s.disabled ~= disabled or s.disabled_reason ~= reason then
  s.disabled, s.disabled_reason = disabled, reason
  save_service(s)
  changed = 1
end
local uuid = redis.call('HGET', KEYS[4], ARGV[2])
local praw = uuid and redis.call('HGET', KEYS[5], uuid)
if praw then
  local p = cjson.decode(praw)
  local traits, has = {}, false
  for _, t in ipairs(p.traits) do
    if t == 'COMPUTE_STATUS_DISABLED' then has = true else traits[#traits + 1] = t end
  end
  if p.parent_uuid == cjson.null and has ~= disabled then
    if disabled then traits[#traits + 1] = 'COMPUTE_STATUS_DISABLED' end
    table.sort(traits)
    p.traits = traits
    p.generation = p.generation + 1
    local data = cjson.encode(p)
    redis.call('HSET', KEYS[5], uuid, data)
    feed('provider', data)
    changed = 1
  end
end
return changed
"""
)

#: KEYS: changes, services, heartbeats. ARGV: maxlen, host, '1' (success) or
#: '0'. A failure counts one more failed build, a success resets the count;
#: only a change is written (and fed).
RECORD_BUILD_RESULT = (
    _FAIL
    + _FEED
    + _SAVE_SERVICE
    + """
local raw = redis.call('HGET', KEYS[2], ARGV[2])
if not raw then return fail('ServiceNotFound', {ident = ARGV[2]}) end
local s = cjson.decode(raw)
local failed = ARGV[3] == '1' and 0 or s.failed_builds + 1
if failed == s.failed_builds then return 0 end
s.failed_builds = failed
save_service(s)
return 1
"""
)

#: KEYS: changes, services, heartbeats. ARGV: maxlen, then (host,
#: capabilities, stats) triples, each part the JSON text to keep or '' to
#: leave it as it is. Every host must have a record (ServiceNotFound, nothing
#: written). The texts are kept verbatim (the caller writes canonical JSON),
#: so a report compares as text and only a change is written (and fed).
#: Returns how many services changed.
REPORT_SERVICES = (
    _FAIL
    + _FEED
    + _SAVE_SERVICE
    + """
local services = {}
for i = 2, #ARGV, 3 do
  local host = ARGV[i]
  if not services[host] then
    local raw = redis.call('HGET', KEYS[2], host)
    if not raw then return fail('ServiceNotFound', {ident = host}) end
    services[host] = cjson.decode(raw)
  end
end
local changed = {}
for i = 2, #ARGV, 3 do
  local s, capabilities, stats = services[ARGV[i]], ARGV[i + 1], ARGV[i + 2]
  -- a record written before reports existed holds neither: as if '{}'
  if capabilities ~= '' and (s.capabilities or '{}') ~= capabilities then
    s.capabilities = capabilities
    changed[#changed + 1] = s
  end
  if stats ~= '' and (s.stats or '{}') ~= stats then
    s.stats = stats
    changed[#changed + 1] = s
  end
end
local seen, written = {}, 0
for _, s in ipairs(changed) do
  if not seen[s.host] then
    seen[s.host] = true
    save_service(s)
    written = written + 1
  end
end
return written
"""
)

#: KEYS: changes, services, heartbeats. ARGV: maxlen, then hosts. Each host
#: with a service record loses its heartbeat and its record is fed (its
#: ``hb`` then '0': down at once, in every host view). Returns how many.
MARK_DOWN = (
    _FEED
    + _SAVE_SERVICE
    + """
local marked = 0
for i = 2, #ARGV do
  local raw = redis.call('HGET', KEYS[2], ARGV[i])
  if raw then
    redis.call('HDEL', KEYS[3], ARGV[i])
    save_service(cjson.decode(raw))
    marked = marked + 1
  end
end
return marked
"""
)

# --- change feed --------------------------------------------------------------------

#: KEYS: changes. Returns the cursor a cold load starts from: the stream's
#: last-generated id ('0-0' while there is no stream), the id CHANGES reads
#: after. The hashes are then read in HSCAN pages, by the caller, not here
#: (see ``RedisStore.compact_snapshot``): one script reading them whole would
#: hold Redis for as long as the cloud is big.
SNAPSHOT = (
    _STREAM_INFO
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return '0-0' end
return stream_info(KEYS[1])['last-generated-id']
"""
)

#: KEYS: changes. ARGV: cursor ('<ms>-<seq>', checked by the caller), count.
#: Returns the entries after the cursor. StreamTruncated when entries after
#: the cursor may have been trimmed (something was trimmed and the cursor is
#: older than the first entry kept), or when the cursor is not from this
#: stream (newer than its last id, no longer one of its entries, or the stream
#: is gone: the data was lost, the store went back in time).
CHANGES = (
    _FAIL
    + _STREAM_INFO
    + """
local cursor = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 0 then
  if cursor == '0-0' then return {} end
  return fail('StreamTruncated', {cursor = cursor})
end

local function older(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

local info = stream_info(KEYS[1])
local last = info['last-generated-id']
local first = info['length'] > 0 and info['recorded-first-entry-id'] or last
local trimmed = info['entries-added'] > info['length']
if older(last, cursor) or (trimmed and older(cursor, first)) then
  return fail('StreamTruncated', {cursor = cursor})
end
-- A cursor this stream issued and has not trimmed is one of its entries: one
-- that is missing went with data the store lost (it went back in time, and
-- has been written to since), so what the reader holds is no longer the store.
if cursor ~= '0-0' and not older(cursor, first)
    and #redis.call('XRANGE', KEYS[1], cursor, cursor) == 0 then
  return fail('StreamTruncated', {cursor = cursor})
end
return redis.call('XRANGE', KEYS[1], '(' .. cursor, '+', 'COUNT', ARGV[2])
"""
)

# --- reads and instance records -----------------------------------------------------

#: KEYS: providers, provider_names. ARGV: name. Returns the JSON or nil.
PROVIDER_BY_NAME = """
local uuid = redis.call('HGET', KEYS[2], ARGV[1])
if not uuid then return false end
return redis.call('HGET', KEYS[1], uuid)
"""

# cjson would cut timestamps to 14 digits; records are flat, so write them here.
_ENCODE_RECORD = """
local function encode_record(record)
  local parts = {}
  for field, value in pairs(record) do
    local text = type(value) == 'number' and string.format('%.17g', value) or cjson.encode(value)
    parts[#parts + 1] = cjson.encode(field) .. ':' .. text
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
"""

#: The ``deadlines`` index's member that says every record written before the
#: index existed has been indexed (scored ``+inf``: never due).
INDEX_COMPLETE = "*indexed*"

# An instance's entry in the ``deadlines`` index, kept as its record says:
# scored by its deadline while it has one, absent otherwise. The score goes
# as text with 17 digits (a Lua number given to redis.call is cut to an
# integer).
_INDEX_DEADLINE = """
local function index_deadline(deadlines_key, uuid, record)
  if type(record.deadline) == 'number' and record.state ~= 'DELETED' then
    redis.call('ZADD', deadlines_key, string.format('%.17g', record.deadline), uuid)
  else
    redis.call('ZREM', deadlines_key, uuid)
  end
end
"""

#: A new record, unless its uuid has one already, and its deadline indexed.
#: KEYS: instances, deadlines. ARGV: uuid, the record's JSON, its deadline
#: (as text; '' for none). Returns 1 when created, 0 when it existed
#: (nothing written).
CREATE_INSTANCE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) end
return 1
"""

#: KEYS: instances, the instance's ``deleted:<uuid>`` key, deadlines. ARGV: uuid,
#: expected states (JSON list, or '' for any), changes (JSON object of
#: top-level fields; ``request_spec`` is itself a JSON string), expected
#: fields (JSON object of field -> value, null for none; '' for no such
#: check). Returns the new record's JSON, or nil when the state was not one of
#: those expected, a field not as expected, or the record is DELETED (a
#: deleted record is never changed; nothing written).
#: The record's entry in the deadline index follows its new deadline.
UPDATE_INSTANCE = (
    _FAIL
    + _FIND_RECORD
    + _FIELDS_DIFFER
    + _ENCODE_RECORD
    + _INDEX_DEADLINE
    + """
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
"""
)

#: Start a delete: the record goes DELETING (with ``changes``) and the
#: instance's fence is set, in one step, so no claim for it can land after.
#: KEYS: instances, the instance's ``deleted:<uuid>`` key, deadlines. ARGV:
#: uuid, changes (JSON object). Returns {1, the new record} when started, {0,
#: the record} when it was DELETING or DELETED already (nothing written).
START_DELETE = (
    _FAIL
    + _FIND_RECORD
    + _ENCODE_RECORD
    + _INDEX_DEADLINE
    + """
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
redis.call('SET', KEYS[2], '"""
    + DELETING_MARKER
    + """')
return {1, data}
"""
)

#: A host says the VM of a DELETING instance is gone there. Once no host is
#: pending (or with force), in one step: the instance's and its migration's
#: allocations are released (their group memberships end with them), the
#: record is DELETED and moves from ``instances`` to its ``deleted:<uuid>``
#: key, which expires after the retention, and leaves the deadline index.
#: KEYS: changes, providers, consumers, groups, instances, the instance's
#: ``deleted:<uuid>`` key, deadlines. ARGV: maxlen, uuid, host ('' for none), '1' to
#: force, retention in ms, now. Returns the record's JSON as it now is, or nil
#: when it is neither DELETING nor DELETED (nothing written).
FINISH_DELETE = (
    _FAIL
    + _FIND_RECORD
    + _FEED
    + _RELEASE_CONSUMER
    + _ENCODE_RECORD
    + _INDEX_DEADLINE
    + """
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
"""
)

#: The conductor's pending set: what is due, read from the deadline index.
#: KEYS: deadlines, instances. ARGV: now, limit. Returns {the records whose
#: deadline is not after ``now``, earliest first (ties by uuid), at most
#: ``limit``, flat as (uuid, JSON) pairs; the uuids of values that are not a
#: JSON object; 1 if the index is complete (it holds ``INDEX_COMPLETE``),
#: else 0}. It reads only the entries due (O(log n + due)), whatever the
#: number of records. An entry out of step with its record (none, no
#: deadline, a later one: a value written around the scripts) is put right
#: (dropped or re-scored) and not returned; a value that is not a JSON object
#: is named once and dropped from the index, never fails the sweep.
DUE_INSTANCES = (
    """
local limit = tonumber(ARGV[2])
local now = tonumber(ARGV[1])
local complete = redis.call('ZSCORE', KEYS[1], '"""
    + INDEX_COMPLETE
    + """') and 1 or 0
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
"""
)

#: Index the deadlines of records written before the index existed (one
#: page of them; the caller walks the instances hash with HSCAN). KEYS:
#: deadlines, instances. ARGV: the uuids of the page's records that have a
#: deadline. Each is re-read here, so a record changed since the page was
#: read is indexed as it is now; one indexed already is left as it is.
#: Returns how many were added.
INDEX_DEADLINES = (
    _INDEX_DEADLINE
    + """
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
"""
)


@dataclass(frozen=True)
class Scripts:
    """The scripts registered with one client (each call is one EVALSHA)."""

    claim: Script
    release: Script
    create_provider: Script
    update_provider: Script
    put_aggregate: Script
    register_services: Script
    set_service_disabled: Script
    record_build_result: Script
    report_services: Script
    snapshot: Script
    changes: Script
    provider_by_name: Script
    create_instance: Script
    update_instance: Script
    move_allocations: Script
    due_instances: Script
    index_deadlines: Script
    start_delete: Script
    finish_delete: Script
    heal_allocation: Script
    mark_down: Script

    @classmethod
    def register(cls, client: redis.Redis | redis.RedisCluster) -> Scripts:
        return cls(
            claim=client.register_script(CLAIM),
            release=client.register_script(RELEASE),
            create_provider=client.register_script(CREATE_PROVIDER),
            update_provider=client.register_script(UPDATE_PROVIDER),
            put_aggregate=client.register_script(PUT_AGGREGATE),
            register_services=client.register_script(REGISTER_SERVICES),
            set_service_disabled=client.register_script(SET_SERVICE_DISABLED),
            record_build_result=client.register_script(RECORD_BUILD_RESULT),
            report_services=client.register_script(REPORT_SERVICES),
            snapshot=client.register_script(SNAPSHOT),
            changes=client.register_script(CHANGES),
            provider_by_name=client.register_script(PROVIDER_BY_NAME),
            create_instance=client.register_script(CREATE_INSTANCE),
            update_instance=client.register_script(UPDATE_INSTANCE),
            move_allocations=client.register_script(MOVE_ALLOCATIONS),
            due_instances=client.register_script(DUE_INSTANCES),
            index_deadlines=client.register_script(INDEX_DEADLINES),
            start_delete=client.register_script(START_DELETE),
            finish_delete=client.register_script(FINISH_DELETE),
            heal_allocation=client.register_script(HEAL_ALLOCATION),
            mark_down=client.register_script(MARK_DOWN),
        )
