-- KEYS: instances, consumers, provider_names, then each instance's
-- ``deleted:<uuid>`` key in ARGV's order. ARGV: pairs of (instance uuid,
-- host or ''). Returns, per pair, the record (its live JSON, else its DELETED
-- JSON, else '') and 1 if the instance's consumer holds an allocation on that
-- host's provider, else 0: what a step's guard reads, in one round trip.

local out = {}
for i = 1, #ARGV, 2 do
  local uuid, host = ARGV[i], ARGV[i + 1]
  local raw = redis.call('HGET', KEYS[1], uuid)
  if not raw then
    raw = redis.call('GET', KEYS[3 + (i + 1) / 2])
    if not raw or raw == '@{deleting_marker}' then raw = '' end
  end
  local holds = 0
  if host ~= '' then
    local provider = redis.call('HGET', KEYS[3], host)
    local consumer = provider and redis.call('HGET', KEYS[2], uuid)
    if consumer then
      local allocations = cjson.decode(consumer).allocations
      if type(allocations) == 'table' and allocations[provider] ~= nil then holds = 1 end
    end
  end
  out[#out + 1] = raw
  out[#out + 1] = holds
end
return out
