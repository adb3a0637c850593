-- Runs examples/gpt/train.lua (TRAIN_LUA) with a test hook: every rank prints "paused at
-- step N" once step N is done (before its checkpoint, if one is due) and then waits there
-- (until the file PAUSE_UNTIL exists, when that is set, with %a replaced by the attempt;
-- else for ever), so the test can break something at a known step. Where: PAUSE_AT =
-- "A:S,..." pauses attempt A at step S; PAUSE_AT_STEP = S is "0:S". PAUSE_RANK: only that
-- rank pauses (the others go on into the next step's collectives). Otherwise it is plain
-- train.lua.
local ds = require 'ds'
local model = require 'ds.model'
local pause_at
for a, s in ((os.getenv('PAUSE_AT') or '') .. ',0:' .. (os.getenv('PAUSE_AT_STEP') or '')):gmatch('(%d+):(%d+)') do
  if tonumber(a) == ds.attempt() then pause_at = math.tointeger(tonumber(s)) end
end
if pause_at then
  local make = model.Model
  model.Model = function(spec)
    local m = make(spec)
    local class = getmetatable(m)
    if not class.paused_hook then
      local train_step = class.train_step
      class.train_step = function(self, t)
        local r = train_step(self, t)
        local only = math.tointeger(tonumber(os.getenv('PAUSE_RANK') or ''))
        if t.step == pause_at and (only == nil or only == ds.rank()) then
          print(string.format('paused at step %d', t.step))
          io.stdout:flush()
          local until_file = os.getenv('PAUSE_UNTIL')
          if until_file then until_file = until_file:gsub('%%a', tostring(ds.attempt())) end
          while true do
            local f = until_file and io.open(until_file)
            if f then f:close() break end
            os.execute('sleep 0.05')
          end
        end
        return r
      end
      class.paused_hook = true
    end
    return m
  end
end
local train = assert(os.getenv('TRAIN_LUA'), 'TRAIN_LUA not set')
arg[0] = train
dofile(train)
