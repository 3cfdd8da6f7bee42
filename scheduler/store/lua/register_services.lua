-- KEYS: changes, services, heartbeats. ARGV: maxlen, then host, rpc_server
-- pairs. A new host starts enabled with no failed builds; a known one keeps
-- its state and only a changed rpc_server is written (and fed).

for i = 2, #ARGV, 2 do
  local host, rpc_server = ARGV[i], ARGV[i + 1]
  local raw = redis.call('HGET', KEYS[2], host)
  if not raw then
    save_service({host = host, rpc_server = rpc_server, disabled = false,
                  disabled_reason = cjson.null, failed_builds = 0})
  else
    local s = cjson.decode(raw)
    if s.rpc_server ~= rpc_server then
      s.rpc_server = rpc_server
      save_service(s)
    end
  end
end
return 1
