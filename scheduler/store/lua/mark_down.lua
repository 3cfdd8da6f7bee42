-- KEYS: changes, services, heartbeats. ARGV: maxlen, then hosts. Each host
-- with a service record loses its heartbeat and its record is fed (its
-- ``hb`` then '0': down at once, in every host view). Returns how many.

local marked = 0
for i = 2, #ARGV do
  local raw = redis.call('HGET', KEYS[2], ARGV[i])
  if raw then
    redis.call('HDEL', KEYS[3], ARGV[i])
    save_service(cjson.decode(raw))
    marked = marked + 1
  end
end
return marked
