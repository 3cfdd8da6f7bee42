-- cjson would cut timestamps to 14 digits; records are flat, so write them here.

local function encode_record(record)
  local parts = {}
  for field, value in pairs(record) do
    local text = type(value) == 'number' and string.format('%.17g', value) or cjson.encode(value)
    parts[#parts + 1] = cjson.encode(field) .. ':' .. text
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
