-- Replace one of a provider's ``inventories``, ``traits`` or ``aggregates``,
-- guarded by its generation. KEYS: changes, providers. ARGV: maxlen, uuid,
-- generation, field, value JSON. Returns the new generation.

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
