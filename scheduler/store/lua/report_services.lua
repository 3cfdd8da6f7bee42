-- KEYS: changes, services, heartbeats. ARGV: maxlen, then (host,
-- capabilities, stats) triples, each part the JSON text to keep or '' to
-- leave it as it is. Every host must have a record (ServiceNotFound, nothing
-- written). The texts are kept verbatim (the caller writes canonical JSON),
-- so a report compares as text and only a change is written (and fed).
-- Returns how many services changed.

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
