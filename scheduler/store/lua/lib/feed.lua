-- Append one change to the stream (KEYS[1]), bounded near ARGV[1] entries.

local function feed(kind, data, ...)
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'k', kind, 'd', data, ...)
end
