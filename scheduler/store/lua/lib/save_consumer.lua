-- Write what a consumer now holds (KEYS[3]; project and user in ARGV[4],
-- ARGV[5]): its group and host only with a group.

local function save_consumer(consumer, allocations, group, host)
  redis.call('HSET', KEYS[3], consumer, cjson.encode({
    uuid = consumer, allocations = allocations, project_id = ARGV[4], user_id = ARGV[5],
    generation = 1, group_uuid = group ~= '' and group or nil,
    host = group ~= '' and host or nil}))
end
