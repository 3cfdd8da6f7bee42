-- Write a service record (KEYS[2]) and feed it with its host's last
-- heartbeat (KEYS[3]). Needs feed.

local function save_service(s)
  redis.call('HSET', KEYS[2], s.host, cjson.encode(s))
  feed('service', cjson.encode(s), 'hb', redis.call('HGET', KEYS[3], s.host) or '0')
end
