-- KEYS: changes. ARGV: cursor ('<ms>-<seq>', checked by the caller), count.
-- Returns the entries after the cursor. StreamTruncated when entries after
-- the cursor may have been trimmed (something was trimmed and the cursor is
-- older than the first entry kept), or when the cursor is not from this
-- stream (newer than its last id, no longer one of its entries, or the stream
-- is gone: the data was lost, the store went back in time).

local cursor = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 0 then
  if cursor == '0-0' then return {} end
  return fail('StreamTruncated', {cursor = cursor})
end

local function older(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  a_ms, a_seq, b_ms, b_seq = tonumber(a_ms), tonumber(a_seq), tonumber(b_ms), tonumber(b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

local info = stream_info(KEYS[1])
local last = info['last-generated-id']
local first = info['length'] > 0 and info['recorded-first-entry-id'] or last
local trimmed = info['entries-added'] > info['length']
if older(last, cursor) or (trimmed and older(cursor, first)) then
  return fail('StreamTruncated', {cursor = cursor})
end
-- A cursor this stream issued and has not trimmed is one of its entries: one
-- that is missing went with data the store lost (it went back in time, and
-- has been written to since), so what the reader holds is no longer the store.
if cursor ~= '0-0' and not older(cursor, first)
    and #redis.call('XRANGE', KEYS[1], cursor, cursor) == 0 then
  return fail('StreamTruncated', {cursor = cursor})
end
return redis.call('XRANGE', KEYS[1], '(' .. cursor, '+', 'COUNT', ARGV[2])
