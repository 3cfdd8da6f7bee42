-- KEYS: changes, providers, provider_names. ARGV: maxlen, uuid, name, parent
-- uuid ('' for a root). Returns the new provider's JSON.

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
