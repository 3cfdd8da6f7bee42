-- An instance's record: (its live JSON, nil), or (nil, its DELETED JSON), or
-- an InstanceNotFound error reply to return when it has neither.

local function find_record(instances_key, deleted_key, uuid)
  local raw = redis.call('HGET', instances_key, uuid)
  if raw then return raw, nil end
  local tomb = redis.call('GET', deleted_key)
  if tomb and tomb ~= '@{deleting_marker}' then return nil, tomb end
  return nil, nil, fail('InstanceNotFound', {ident = uuid})
end
