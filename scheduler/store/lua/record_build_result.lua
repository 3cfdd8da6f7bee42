-- KEYS: changes, services, heartbeats. ARGV: maxlen, host, '1' (success) or
-- '0'. A failure counts one more failed build, a success resets the count;
-- only a change is written (and fed).

local raw = redis.call('HGET', KEYS[2], ARGV[2])
if not raw then return fail('ServiceNotFound', {ident = ARGV[2]}) end
local s = cjson.decode(raw)
local failed = ARGV[3] == '1' and 0 or s.failed_builds + 1
if failed == s.failed_builds then return 0 end
s.failed_builds = failed
save_service(s)
return 1
