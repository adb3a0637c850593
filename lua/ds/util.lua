-- Small helpers the ds library shares: errors that name the script's line, option checks.
local util = {}

-- Raises msg at the first caller outside the ds library, so the message starts with the
-- script author's file:line (the traceback follows).
function util.error(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then level = 2 break end
    if info.what ~= 'C' and not info.source:find('lua/ds/', 1, true) then break end
    level = level + 1
  end
  error(msg, level)
end

function util.errorf(fmt, ...) util.error(string.format(fmt, ...)) end

-- Every key of t must be in allowed (a set); what names the thing for the message.
function util.check_keys(t, allowed, what)
  if type(t) ~= 'table' then util.errorf('%s: expected a table of options, got %s', what, type(t)) end
  for k in pairs(t) do
    if type(k) ~= 'number' and not allowed[k] then
      local names = {}
      for a in pairs(allowed) do names[#names + 1] = a end
      table.sort(names)
      util.errorf("%s: unknown option '%s' (known: %s)", what, tostring(k), table.concat(names, ', '))
    end
  end
end

function util.set(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

function util.int(t, key, what, dflt, min)
  local v = t[key]
  if v == nil then v = dflt end
  if v == nil then util.errorf("%s: '%s' is required", what, key) end
  if math.type(v) ~= 'integer' then util.errorf("%s: '%s' must be an integer, got %s", what, key, tostring(v)) end
  if min and v < min then util.errorf("%s: '%s' = %d must be >= %d", what, key, v, min) end
  return v
end

function util.num(t, key, what, dflt, lo, hi)
  local v = t[key]
  if v == nil then v = dflt end
  if type(v) ~= 'number' then util.errorf("%s: '%s' must be a number, got %s", what, key, tostring(v)) end
  if (lo and v < lo) or (hi and v > hi) then
    util.errorf("%s: '%s' = %g outside [%s, %s]", what, key, v, tostring(lo or '-inf'), tostring(hi or 'inf'))
  end
  return v
end

function util.bool(t, key, what, dflt)
  local v = t[key]
  if v == nil then return dflt end
  if type(v) ~= 'boolean' then util.errorf("%s: '%s' must be true or false, got %s", what, key, tostring(v)) end
  return v
end

function util.human_bytes(n)
  if n >= 2^30 then return string.format('%.2f GiB', n / 2^30) end
  if n >= 2^20 then return string.format('%.1f MiB', n / 2^20) end
  if n >= 2^10 then return string.format('%.1f KiB', n / 2^10) end
  return string.format('%d B', n)
end

return util
