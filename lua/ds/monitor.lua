-- ds.monitor: every rank's per-step metrics, sent to the launcher, which writes
-- metrics.jsonl, TensorBoard files and report.html and draws the progress line
-- (docs/monitoring.md). model:train_step publishes each of its steps by itself; a script
-- with its own loop calls ds.monitor.step{...} once per optimizer step. Under
-- `dsrun run` (no launcher) nothing is sent and each call costs next to nothing.
--
-- One record per line, a JSON object, on the rank's metrics pipe (DS_METRICS_FD, which
-- the node's agent forwards to the controller):
--   {"kind":"step","step":N,"total_steps":T,"step_time":s,"comm_wait":s,"loss":x,"lr":x,
--    "grad_norm":x,"loss_scale":x,"skipped":b,"tokens":n,"mem":{"params":[cur,peak],...}}
--   {"kind":"model","stages":[{"name":..,"params":n,"zero":z,"checkpoint":c,
--    "precision":p}, ...],"predicted":{"params":bytes, ...}}
local core = require 'ds._core'
local util = require 'ds.util'

local M = {}

-- The allocation categories in the order reports stack them (ds.memory()'s keys).
M.CATEGORIES = {'params', 'grads', 'optimizer', 'activations', 'workspace', 'comm', 'data'}

local state = {
  channel = core.monitor_publish ~= nil, -- false once sending found no launcher
  total = nil,                           -- total steps, for the progress line's ETA
  last = core.now(),                     -- when the previous step ended
  waited = nil,                          -- comm.wait_seconds() then
  described = setmetatable({}, {__mode = 'k'}), -- models already sent
  steps = 0,                             -- steps published so far
}

local function num(x)
  if x ~= x or x == math.huge or x == -math.huge then return 'null' end
  if math.type(x) == 'integer' then return string.format('%d', x) end
  return string.format('%.17g', x)
end

local function str(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == '\\' then return '\\\\' end
    return string.format('\\u%04x', c:byte())
  end) .. '"'
end

local function publish(fields)
  local ok, why = core.monitor_publish('{' .. table.concat(fields, ',') .. '}')
  if ok == false then state.channel = false end
  if ok == nil then
    state.channel = false
    io.stderr:write('ds.monitor: metrics are no longer sent: ' .. tostring(why) .. '\n')
  end
end

local function comm_waited()
  return core.comm and core.comm.wait_seconds and core.comm.wait_seconds() or 0
end

-- ds.monitor.total_steps(n): the run's planned number of steps (the progress line's
-- step/total and ETA). Also starts the clock of the first step.
function M.total_steps(n)
  if n ~= nil and (math.type(n) ~= 'integer' or n < 1) then
    util.error('ds.monitor.total_steps: expected an integer >= 1 (or nil)')
  end
  state.total = n
  state.last = core.now()
  state.waited = comm_waited()
end

-- ds.monitor.model(model [, predicted]): the model's stages (name, parameter count and
-- the ZeRO stage, checkpointing and precision each runs with) for the report, and the
-- memory planner's predicted bytes per category ({params = bytes, ...}) when there is
-- one. model:train_step sends its model once by itself.
function M.model(model, predicted)
  if type(model) ~= 'table' or type(model.stages) ~= 'table' then
    util.error('ds.monitor.model: expected a ds.Model')
  end
  if predicted ~= nil and type(predicted) ~= 'table' then
    util.error('ds.monitor.model: predicted must be a table {category = bytes}')
  end
  state.described[model] = true
  if not state.channel then return end
  local stages = {}
  for _, s in ipairs(model.stages) do
    local i = s:info()
    stages[#stages + 1] = string.format('{"name":%s,"params":%s,"zero":%s,"checkpoint":%s,"precision":%s}',
      str(tostring(i.name)), num(i.numel), num(i.zero), str(tostring(i.checkpoint)), str(tostring(i.precision)))
  end
  local fields = {'"kind":"model"', '"stages":[' .. table.concat(stages, ',') .. ']'}
  if predicted then
    local p = {}
    for _, c in ipairs(M.CATEGORIES) do
      local v = predicted[c]
      if v ~= nil then
        if type(v) ~= 'number' then util.errorf('ds.monitor.model: predicted.%s must be a number of bytes', c) end
        p[#p + 1] = str(c) .. ':' .. num(v)
      end
    end
    fields[#fields + 1] = '"predicted":{' .. table.concat(p, ',') .. '}'
  end
  publish(fields)
end

local STEP_KEYS = util.set {'step', 'loss', 'lr', 'grad_norm', 'tokens', 'loss_scale', 'skipped', 'time', 'model'}

local function opt_number(m, key)
  local v = m[key]
  if v ~= nil and type(v) ~= 'number' then util.errorf('ds.monitor.step: %s must be a number', key) end
  return v
end

-- ds.monitor.step{step=, loss=, lr=, grad_norm=, tokens=, loss_scale=, skipped=, time=,
-- model=}: one optimizer step of this rank. Only step is required. time: the step's
-- seconds (default: since the previous step was published); tokens: this rank's tokens
-- in the step; model: sent once for the report. Memory (ds.memory()) and the time spent
-- waiting on collectives are added here.
function M.step(m)
  util.check_keys(m, STEP_KEYS, 'ds.monitor.step')
  if math.type(m.step) ~= 'integer' or m.step < 0 then util.error('ds.monitor.step: step must be an integer >= 0') end
  for _, k in ipairs {'loss', 'lr', 'grad_norm', 'loss_scale', 'time'} do opt_number(m, k) end
  if m.tokens ~= nil and (math.type(m.tokens) ~= 'integer' or m.tokens < 0) then
    util.error('ds.monitor.step: tokens must be an integer >= 0')
  end
  if m.skipped ~= nil and type(m.skipped) ~= 'boolean' then util.error('ds.monitor.step: skipped must be a boolean') end
  if m.model ~= nil and not state.described[m.model] then M.model(m.model) end
  local now, waited = core.now(), comm_waited()
  local dt = m.time or (now - state.last)
  local dw = waited - (state.waited or waited)
  state.last, state.waited = now, waited
  if not state.channel then return end
  state.steps = state.steps + 1
  local f = {'"kind":"step"', '"step":' .. num(m.step), '"step_time":' .. num(dt), '"comm_wait":' .. num(dw)}
  if state.total then f[#f + 1] = '"total_steps":' .. num(state.total) end
  for _, k in ipairs {'loss', 'lr', 'grad_norm', 'loss_scale', 'tokens'} do
    if m[k] ~= nil then f[#f + 1] = str(k) .. ':' .. num(m[k]) end
  end
  if m.skipped ~= nil then f[#f + 1] = '"skipped":' .. tostring(m.skipped) end
  local mem, cats = core.memory(), {}
  for i = 1, #M.CATEGORIES + 1 do
    local c = M.CATEGORIES[i] or 'total'
    if mem[c] then cats[#cats + 1] = string.format('%s:[%s,%s]', str(c), num(mem[c].current), num(mem[c].peak)) end
  end
  f[#f + 1] = '"mem":{' .. table.concat(cats, ',') .. '}'
  publish(f)
end

-- For model:train_step: the step began at t0 (the first step's time when nothing was
-- published before).
function M.train_step_done(model, t, r, t0)
  if state.steps == 0 then state.last = t0 end
  M.step {step = t.step or 0, loss = r.loss, lr = r.lr, grad_norm = r.grad_norm, tokens = r.tokens,
          loss_scale = r.loss_scale, skipped = r.skipped, model = model}
end

return M
