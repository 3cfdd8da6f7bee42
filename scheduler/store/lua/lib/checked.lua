-- The optional record check of a write whose KEYS[1..4] are the allocation
-- keys: KEYS[5], KEYS[6] the instances hash and the instance's deleted key,
-- ARGV[first], ARGV[states], ARGV[expect] its uuid, states and expected fields
-- (absent: none); scripts.py's _checked(first) fills in the three indices.

if ARGV[@{first}] then
  local refused = check_record(
    KEYS[5], KEYS[6], ARGV[@{first}], ARGV[@{states}], ARGV[@{expect}]
  )
  if refused then return refused end
end
