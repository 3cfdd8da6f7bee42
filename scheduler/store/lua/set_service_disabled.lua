-- KEYS: changes, services, heartbeats, provider_names, providers. ARGV:
-- maxlen, host, '1' or '0', reason JSON (a string or null). In the same
-- step, the host's root provider (the provider named after it, if any) gets
-- or loses the trait COMPUTE_STATUS_DISABLED, its generation bumped, so the
-- trait and the service record never disagree. Writes (and feeds) only a
-- change; returns 1 if anything changed.

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
