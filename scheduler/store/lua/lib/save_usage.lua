-- Write a provider back and feed its usage change. Needs feed.

local function save_usage(providers_key, uuid, p)
  redis.call('HSET', providers_key, uuid, cjson.encode(p))
  feed('usage', cjson.encode({uuid = uuid, generation = p.generation, usages = p.usages,
                              consumers = p.consumers}))
end
