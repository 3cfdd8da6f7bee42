-- An instance's entry in the ``deadlines`` index, kept as its record says:
-- scored by its deadline while it has one, absent otherwise. The score goes
-- as text with 17 digits (a Lua number given to redis.call is cut to an
-- integer).

local function index_deadline(deadlines_key, uuid, record)
  if type(record.deadline) == 'number' and record.state ~= 'DELETED' then
    redis.call('ZADD', deadlines_key, string.format('%.17g', record.deadline), uuid)
  else
    redis.call('ZREM', deadlines_key, uuid)
  end
end
