-- XINFO STREAM's flat reply as a table.

local function stream_info(stream)
  local flat = redis.call('XINFO', 'STREAM', stream)
  local info = {}
  for i = 1, #flat, 2 do info[flat[i]] = flat[i + 1] end
  return info
end
