-- One member less for a server group on a host (the group goes with its last).

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
