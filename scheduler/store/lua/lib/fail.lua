-- The error reply of a refusal: 'SCHEDULER <Code> <JSON fields>' (see scripts.py).

local function fail(code, fields)
  return redis.error_reply('SCHEDULER ' .. code .. ' ' .. cjson.encode(fields))
end
