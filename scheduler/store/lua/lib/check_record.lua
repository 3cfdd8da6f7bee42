-- A write's record check (:class:`scheduler.store.RecordCheck`): the error to
-- return (RecordChanged) when the instance's record (live, or DELETED within
-- its retention) is not in one of ``states`` with ``expect``'s fields; nil
-- when it is. Needs fail, find_record and fields_differ.

local function check_record(instances_key, deleted_key, uuid, states, expect)
  local raw, tomb = find_record(instances_key, deleted_key, uuid)
  if not (raw or tomb) then
    return fail('RecordChanged', {uuid = uuid, why = 'no instance record'})
  end
  local record = cjson.decode(raw or tomb)
  local due = false
  for _, state in ipairs(cjson.decode(states)) do
    if record.state == state then due = true end
  end
  if not due then
    return fail('RecordChanged', {uuid = uuid, why = 'instance is ' .. tostring(record.state)})
  end
  if fields_differ(record, cjson.decode(expect)) then
    return fail('RecordChanged', {uuid = uuid, why = 'the record moved on'})
  end
  return nil
end
