-- The ds library: what a rank's script sees with `local ds = require 'ds'`.
-- The C core (runtime) is ds._core; this file wraps it in the torch7-nn idiom:
--   ds.nn      layers and the criterion          ds.Stage, ds.Model
--   ds.optim   AdamW, SGD, LR schedules          ds.tensor, ds.memory, ds.now
--   ds.monitor per-step metrics to the launcher
local core = require 'ds._core'

local ds = {}
for k, v in pairs(core) do ds[k] = v end
ds._core = core

local util = require 'ds.util'
local model = require 'ds.model'
ds.nn = require 'ds.nn'
ds.optim = require 'ds.optim'
ds.monitor = require 'ds.monitor'
ds.Stage = model.Stage
ds.Model = model.Model
ds.engine_defaults = model.defaults
ds.engine_options = core.engine_options
ds.engine_option = core.engine_option
ds.error = util.error

-- The token-file loader takes its batch (rows per rank) and seed from the job unless the
-- script gives them ([engine] micro_batch, seed).
if core.data then
  local data = {}
  for k, v in pairs(core.data) do data[k] = v end
  function data.open(cfg)
    if type(cfg) ~= 'table' then return core.data.open(cfg) end
    local c = {}
    for k, v in pairs(cfg) do c[k] = v end
    c.batch = model.job_value('micro_batch', c.batch, 'ds.data.open batch')
    c.seed = model.job_value('seed', c.seed, 'ds.data.open seed')
    return core.data.open(c)
  end
  ds.data = data
end

-- A table of current and peak bytes per allocation category, as text.
function ds.memory_report()
  local m = core.memory()
  local lines = {string.format('%-12s %14s %14s', 'memory', 'current', 'peak')}
  for _, cat in ipairs {'params', 'grads', 'optimizer', 'activations', 'workspace', 'comm', 'data', 'total'} do
    if m[cat] then
      lines[#lines + 1] = string.format('%-12s %14s %14s', cat, util.human_bytes(m[cat].current),
                                        util.human_bytes(m[cat].peak))
    end
  end
  if m.reserved_unused and m.reserved_unused > 0 then -- a device's caching allocator
    lines[#lines + 1] = string.format('%-12s %14s', 'reserved', util.human_bytes(m.reserved_unused))
  end
  return table.concat(lines, '\n')
end

return ds
