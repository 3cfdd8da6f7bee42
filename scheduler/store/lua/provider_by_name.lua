-- KEYS: providers, provider_names. ARGV: name. Returns the JSON or nil.

local uuid = redis.call('HGET', KEYS[2], ARGV[1])
if not uuid then return false end
return redis.call('HGET', KEYS[1], uuid)
