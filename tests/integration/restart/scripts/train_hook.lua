-- Runs examples/gpt/train.lua (TRAIN_LUA) with a test hook: when PAUSE_AT_STEP is set,
-- every rank of attempt 0 prints "paused at step N" once step N is done (before its
-- checkpoint, if one is due) and then waits there (until the file PAUSE_UNTIL exists,
-- when that is set; else for ever), so the test can break something at a known step.
-- PAUSE_RANK: only that rank pauses (the others go on into the next step's collectives).
-- Later attempts, and runs without PAUSE_AT_STEP, are plain train.lua.
local ds = require 'ds'
local model = require 'ds.model'
local pause_at = math.tointeger(tonumber(os.getenv('PAUSE_AT_STEP') or ''))
if pause_at and ds.attempt() == 0 then
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
