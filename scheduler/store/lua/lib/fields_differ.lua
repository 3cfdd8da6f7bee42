-- Whether a record's fields differ from ``expect`` (field -> value, JSON null
-- for none; a field absent from the record is none).

local function fields_differ(record, expect)
  for field, want in pairs(expect) do
    local have = record[field]
    if want == cjson.null then
      if have ~= nil and have ~= cjson.null then return true end
    elseif have ~= want then
      return true
    end
  end
  return false
end
