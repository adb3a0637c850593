-- Stages and models. A stage is an ordered list of layers with its own options; its
-- parameters and gradients are one flat buffer each. A model is an ordered list of
-- stages plus a criterion; forward and backward walk the stages (one C call each).
local util = require 'ds.util'
local core = require 'ds._core'
local nn = require 'ds.nn'

local M = {}

-- The engine's options (common/engine_opts.h) come from ds._core with their types,
-- ranges and defaults: this file checks no value by hand.
local OPTIONS = core.engine_options()
local STAGE_OPTS = {name = true, seed = true} -- what ds.Stage{...} takes besides layers
for _, o in ipairs(OPTIONS) do if o.scope == 'stage' then STAGE_OPTS[o.name] = true end end

-- Refuses unknown keys and values the engine would refuse, with what and the script's
-- line in the message.
-- zero, checkpoint and precision may be 'auto': the memory planner chooses (ds.memplan).
local AUTO = {zero = true, checkpoint = true, precision = true}
local function check_stage_opts(o, what)
  util.check_keys(o, STAGE_OPTS, what)
  for k, v in pairs(o) do
    if type(k) == 'string' and k ~= 'name' and not (AUTO[k] and v == 'auto') then core.engine_option(k, v, what) end
  end
end
M.check_stage_opts = check_stage_opts

-- The job's [engine] section as this rank received it (DS_ENGINE_*, one variable per
-- option; the options' defaults where unset, as under `dsrun run`): {zero=, precision=,
-- checkpoint=, micro_batch=, grad_accum=, seed=, ...} by option name, plus the same
-- values in the shapes ds.Model takes them: loss_scaler = {init_scale=, scale_window=,
-- hysteresis=, min_scale=} and zero_bucket.
-- given: the set of options the job states (its [engine], a --set or its DeepSpeed
-- config; DS_ENGINE_GIVEN), as opposed to the defaults it passes on.
local defaults
function M.defaults()
  if defaults then return defaults end
  local d = core.engine_defaults()
  d.loss_scaler = {init_scale = 2.0 ^ d.initial_scale_power, scale_window = d.loss_scale_window,
                   hysteresis = d.hysteresis, min_scale = d.min_loss_scale}
  d.zero_bucket = d.reduce_bucket_size
  d.given = {}
  for name in (os.getenv('DS_ENGINE_GIVEN') or ''):gmatch('[^,]+') do d.given[name] = true end
  defaults = d
  return d
end

-- The value of engine option `name` for `what`: the script's when it gives one, else the
-- job's. A script's value that differs from one the job states is said once per option
-- (rank 0, stderr): the job asked for something the script overrides.
local told = {}
function M.note(msg) io.stderr:write(msg, '\n') end -- tests replace it
function M.job_value(name, script_value, what)
  local d = M.defaults()
  if script_value == nil then return d[name] end
  if d.given[name] and script_value ~= d[name] and not told[name] and (core.rank and core.rank() or 0) == 0 then
    told[name] = true
    M.note(string.format("ds: %s: the script's %s = %s is used, not the job's %s",
      what, name, tostring(script_value), tostring(d[name])))
  end
  return script_value
end

-- Says so for each stage option the script gives that differs from the job's.
local function note_stage_opts(o, what)
  for k, v in pairs(o) do
    if type(k) == 'string' and k ~= 'name' and k ~= 'seed' and v ~= 'auto' then -- 'auto': the planner's
      M.job_value(k, core.engine_option(k, v, what), what)
    end
  end
end
M.note_stage_opts = note_stage_opts

-- ds.Stage{layer1, layer2, ..., name=, zero=, checkpoint=, precision=, seed=}; options
-- not given come from the job's [engine] section (ds._core.stage_new reads them).
function M.Stage(spec)
  if type(spec) ~= 'table' then util.error('ds.Stage: expected a table {layer, ..., options}') end
  check_stage_opts(spec, 'ds.Stage')
  note_stage_opts(spec, 'ds.Stage ' .. tostring(spec.name or 'stage'))
  return M.stage_of(spec)
end

-- ds.Stage without the note (gpt.GPT gives notes for the options its caller chose).
function M.stage_of(spec)
  if #spec == 0 then util.error('ds.Stage: no layers') end
  local desc = {name = spec.name or 'stage', seed = spec.seed or M.defaults().seed}
  for k in pairs(STAGE_OPTS) do
    if desc[k] == nil then desc[k] = spec[k] end
  end
  -- the job's [engine] may leave a stage option to the planner too (zero_stage = auto)
  for k in pairs(AUTO) do
    if desc[k] == nil and M.defaults()[k] == 'auto' then desc[k] = 'auto' end
  end
  for i, l in ipairs(spec) do
    if not nn.is_layer(l) then util.errorf('ds.Stage: element %d is not a layer (%s)', i, type(l)) end
    desc[i] = l
  end
  -- `dsrun plan-memory`, or an option left to the planner: a description of the stage,
  -- no memory; ds.memplan builds it once it has chosen (at the first train_step)
  local memplan = require 'ds.memplan'
  local auto = memplan.auto_fields(desc)
  desc.describe = (memplan.planning() or auto ~= nil) or nil
  local s = core.stage_new(auto and memplan.without_auto(desc) or desc)
  memplan.remember(s, desc, auto) -- a model with an 'auto' stage builds all of them again
  return s
end

local Model = {}
Model.__index = Model

-- A CrossEntropy takes 16-bit logits: the last stage, when 16-bit and ending in a Linear
-- (the head), writes them in its precision (the loss in fp32 from them, d(logits) in
-- their type: docs/precision.md). Any other criterion gets the stage's fp32 output.
local function ask_logits16(m)
  m.stages[#m.stages]:half_output(m.criterion.kind == 'CrossEntropy')
end

-- ds.Model{stage1, stage2, ..., criterion = nn.CrossEntropy(), zero_bucket = elements,
-- zero_prefetch = true, loss_scaler = {init_scale=, scale_window=, hysteresis=,
-- min_scale=, ...}}. A model trains through its ZeRO object, ds._core.zero_new
-- (docs/zero.md), whatever the world size and the stages' ZeRO: hooks around each
-- stage's forward and backward, the reduction at the accumulation boundary, the global
-- norm and the (sharded) optimizer step; ZeRO 0 on one rank is the plain case, where
-- every collective is a no-op. A model with an fp16 stage trains with a dynamic loss
-- scaler (DeepSpeed's defaults unless loss_scaler says otherwise; docs/precision.md).
function M.Model(spec)
  util.check_keys(spec, util.set {'criterion', 'zero_bucket', 'zero_prefetch', 'loss_scaler', 'allow_fp16'}, 'ds.Model')
  local m = setmetatable({stages = {}, criterion = spec.criterion or nn.CrossEntropy()}, Model)
  for i, s in ipairs(spec) do
    if type(s) ~= 'userdata' or not pcall(s.info, s) then
      util.errorf('ds.Model: element %d is not a ds.Stage', i)
    end
    m.stages[i] = s
  end
  if #m.stages == 0 then util.error('ds.Model: no stages') end
  ask_logits16(m)
  local bucket = spec.zero_bucket
  if bucket ~= nil then bucket = core.engine_option('reduce_bucket_size', bucket, 'ds.Model zero_bucket') end
  bucket = M.job_value('reduce_bucket_size', bucket, 'ds.Model zero_bucket')
  m.zero_bucket, m.zero_prefetch = bucket, spec.zero_prefetch ~= false
  local allow = spec.allow_fp16
  if allow ~= nil and type(allow) ~= 'boolean' then
    util.errorf('ds.Model: allow_fp16 must be true or false, got %s', tostring(allow))
  end
  if allow == nil then allow = M.defaults().allow_fp16 == 'true' end -- [engine] allow_fp16
  m.allow_fp16, m.loss_scaler_opts = allow, spec.loss_scaler
  local memplan = require 'ds.memplan'
  if memplan.planning() then return memplan.Plan(m, Model) end
  if memplan.has_auto(m.stages) then
    m.auto = true -- the planner chooses at the first train_step, from the batch's shapes
    return m
  end
  return M.attach_zero(m)
end

-- The loss scaler (a model with an fp16 stage) and the ZeRO object over the stages.
function M.attach_zero(m)
  ask_logits16(m) -- the planner may have built the stages again
  local spec = {loss_scaler = m.loss_scaler_opts}
  local bucket = m.zero_bucket
  local fp16 = false
  for _, s in ipairs(m.stages) do fp16 = fp16 or s:info().precision == 'fp16' end
  if spec.loss_scaler ~= nil and type(spec.loss_scaler) ~= 'table' then
    util.error('ds.Model: loss_scaler must be a table of options')
  end
  if fp16 or spec.loss_scaler then m.scaler = core.loss_scaler(spec.loss_scaler or M.defaults().loss_scaler) end
  local t = {bucket = bucket, prefetch = m.zero_prefetch}
  for k, s in ipairs(m.stages) do t[k] = s end
  m.zero = core.zero_new(t)
  m.rank = m.zero:info().rank
  return m
end

-- Output of the last stage (logits for a GPT: 16-bit when the last stage is, see
-- ask_logits16; the tensor API reads them widened). run: {train=, step=, micro=, row0=}; row0:
-- global batch row of x's first row (data parallel: rank * local rows), keys dropout.
function Model:predict(x, run)
  run = run or {}
  local train = run.train ~= false
  local z = self.zero
  for k, s in ipairs(self.stages) do
    z:before_forward(k)
    x = s:forward(x, train, run.step or 0, run.micro or 0, run.row0 or 0)
    z:after_forward(k)
  end
  return x
end

-- Forward through every stage and the criterion; returns the mean loss.
function Model:forward(x, targets, run)
  self.output = self:predict(x, run)
  return self.criterion:forward(self.output, targets)
end

-- Backward through the stages from the criterion's gradient d.
local function backward_stages(self, d)
  local z = self.zero
  for i = #self.stages, 1, -1 do
    z:before_backward(i)
    d = self.stages[i]:backward(d)
    z:after_backward(i)
  end
end

-- Backward of scale * loss (scale = 1/accumulation steps); gradients accumulate. The
-- criterion writes its gradient over the logits: model.output holds d(loss)/d(logits)
-- afterwards.
function Model:backward(scale)
  backward_stages(self, self.criterion:backward(scale or 1.0))
end

-- forward then backward of scale * loss, the criterion's two passes fused into one (the
-- same bits); returns the mean loss.
function Model:forward_backward(x, targets, run, scale)
  self.output = self:predict(x, run)
  local loss, d = self.criterion:forward_backward(self.output, targets, scale or 1.0)
  backward_stages(self, d)
  return loss
end

function Model:zero_grad() self.zero:zero_grad() end

-- Global gradient norm over every stage, summed in stage order over every rank's shard
-- of the reduced gradients; every rank gets the same bits.
function Model:grad_norm() return math.sqrt(self.zero:grad_sumsq()) end

-- The factor that brings a gradient norm n to at most max_norm (1: no clipping).
local function clip_factor(n, max_norm)
  if max_norm and max_norm > 0 and n > max_norm then return max_norm / (n + 1e-6) end
  return 1.0
end

-- Scales the gradients so their global norm is at most max_norm; returns the norm
-- before clipping.
function Model:clip_grad_norm(max_norm)
  local n = self:grad_norm()
  local k = clip_factor(n, max_norm)
  if k ~= 1.0 then self.zero:scale_grads(k) end
  return n
end

-- Parameter count (padding in the flat buffers not counted).
function Model:num_parameters()
  local n = 0
  for _, s in ipairs(self.stages) do
    for _, p in ipairs(s:param_table()) do n = n + p.numel end
  end
  return n
end

-- {name, stage, info} for every parameter, in stage and flat order.
function Model:parameters()
  local out = {}
  for _, s in ipairs(self.stages) do
    for _, p in ipairs(s:param_table()) do out[#out + 1] = {name = p.name, stage = s, info = p} end
  end
  return out
end

-- A view of the named parameter (or its gradient with grad = true).
function Model:param(name, grad)
  for _, s in ipairs(self.stages) do
    for _, p in ipairs(s:param_table()) do
      if p.name == name then return s:param(name, grad) end
    end
  end
  util.errorf("model has no parameter '%s'", tostring(name))
end

-- Runs fn() with every ZeRO-3 stage's full parameters gathered (collective: every rank
-- calls it); with write = true what fn wrote into them is kept (every rank must write
-- the same). Parameter views taken inside are valid only inside.
function Model:with_params(fn, write)
  local z = self.zero
  for k in ipairs(self.stages) do z:gather_params(k) end
  local ok, err = pcall(fn)
  if ok and write then
    for k in ipairs(self.stages) do z:store_params(k) end
  end
  for k in ipairs(self.stages) do z:release_params(k) end
  if not ok then error(err, 0) end
end

-- A state checkpoint (collective; runtime/ckpt, docs/zero.md): each rank writes its own
-- range of every stage's parameters and optimizer state as logical arrays
-- "<stage>/params", "<stage>/adam_m", ..., so loading at another world size or ZeRO
-- stage reshards. state: a table saved in meta.json (step = required).
function Model:save(dir, optimizer, state)
  if type(state) ~= 'table' or math.type(state.step) ~= 'integer' then
    util.error('model:save(dir, optimizer, state): state.step must be an integer')
  end
  local z = self.zero
  local info = z:info()
  local w = core.ckpt_writer(dir, state.step, info.rank, info.world)
  for k, s in ipairs(self.stages) do
    for _, a in ipairs(z:arrays(k, 'save')) do w:add(s:info().name .. '/' .. a.name, a.tensor, a.total, a.begin) end
  end
  local saved = {}
  for key, v in pairs(state) do saved[key] = v end
  saved.export = saved.export or require('ds.export').table(self) -- what `dsrun ckpt export` writes
  saved.optimizer_t = optimizer and optimizer.t or 0
  saved.world_size = info.world
  saved.precision, saved.seeds = {}, {}
  for _, s in ipairs(self.stages) do
    saved.precision[s:info().name], saved.seeds[s:info().name] = s:info().precision, s:info().seed
  end
  if self.scaler then saved.loss_scaler = self.scaler:state() end
  local ok, err = w:commit(saved, function() z:barrier() end)
  if not ok then util.errorf('model:save %s: %s', dir, tostring(err)) end
end

-- Loads dir's latest checkpoint (or a step directory) into the model and optimizer, at
-- any world size and ZeRO stages; returns the saved state table.
function Model:load(dir, optimizer)
  local z = self.zero
  local ck, err = core.ckpt_open(dir)
  if not ck then util.errorf('model:load: %s', tostring(err)) end
  local state = ck:state()
  local kind = optimizer and (optimizer.momentum and 'sgd' or 'adamw') or nil
  local saved = {}
  for _, a in ipairs(ck:arrays()) do saved[a.name] = true end
  for k, s in ipairs(self.stages) do
    for _, a in ipairs(z:arrays(k, 'load', kind)) do
      -- The saved array must be exactly this model's size: a bigger model's checkpoint
      -- would otherwise load its leading part without complaint.
      local name = s:info().name .. '/' .. a.name
      -- Saved before the optimizer's first step (fp16 runs skip their first steps while
      -- the loss scale backs off): no moments yet, and zeros are what they would be.
      local fresh = a.name ~= 'params' and not saved[name] and (state.optimizer_t or 0) == 0
      if not fresh then
        local ok, e = ck:expect(name, 'fp32', a.total)
        if ok then ok, e = ck:read(name, a.begin, a.tensor) end
        if not ok then ck:close(); util.errorf('model:load: %s', tostring(e)) end
      end
    end
    z:masters_to_params(k) -- 16-bit stages: the working copy from the loaded masters
  end
  if optimizer then optimizer.t = state.optimizer_t or 0 end
  if self.scaler and type(state.loss_scaler) == 'table' then self.scaler:set_state(state.loss_scaler) end
  ck:close()
  return state
end

-- Resumes training from dir's latest checkpoint (collective): returns the saved state
-- table (state.step: the last step done), or nil when dir holds no checkpoint yet (no
-- `latest`: a fresh start). A damaged checkpoint raises an error instead of starting
-- over: a missing or malformed `latest`, shard or meta.json, a checksum that fails, a
-- model that does not match. Restores the parameters, the optimizer's moments and step
-- count, the loss scaler; the stages' seeds must be the saved ones, since dropout draws
-- from (seed, step, layer, micro-batch): the step then restores the random streams, as
-- it does the learning-rate schedule and ds.data's and ds.synth's (stateless) sampling.
-- opts.data: a data source with :set_state(v) gets back the state.data it was saved with.
function Model:resume(dir, optimizer, opts)
  if type(dir) ~= 'string' then util.error('model:resume(dir, optimizer [, opts]): dir must be a string') end
  util.check_keys(opts or {}, util.set {'data'}, 'model:resume')
  local latest, err = core.ckpt_latest(dir)
  if latest == nil and err ~= nil then util.errorf('model:resume: %s', tostring(err)) end
  if latest == nil then return nil end
  local state = self:load(dir, optimizer)
  for _, s in ipairs(self.stages) do
    local name, seed = s:info().name, s:info().seed
    local saved = type(state.seeds) == 'table' and state.seeds[name]
    if saved ~= nil and saved ~= seed then
      util.errorf('model:resume %s: stage %s was saved with seed %s, this run has %s', dir, name,
                  tostring(saved), tostring(seed))
    end
  end
  local data = opts and opts.data
  if data ~= nil and state.data ~= nil and data.set_state then data:set_state(state.data) end
  -- (the controller's launcher.log notes where each attempt resumed)
  if core.store and core.rank and core.rank() == 0 then core.store.set('resumed', tostring(state.step)) end
  return state
end

-- Frees every activation buffer (they come back with the next forward).
function Model:release()
  for _, s in ipairs(self.stages) do s:release() end
  self.criterion:release()
end

-- One optimizer step's worth of work: zero the gradients, run `accum` micro-batches
-- (next_batch(micro) -> x, y), each loss scaled by 1/accum, clip, step.
-- Returns {loss=, grad_norm=, lr=, tokens=, loss_scale=, skipped=}. With a loss scaler
-- (fp16), each backward runs on loss * scale; gradients that overflowed anywhere (a
-- non-finite global norm, the same on every rank) skip the optimizer step on every rank
-- and the scaler backs off; otherwise the step removes the scale along with clipping.
function Model:train_step(t)
  util.check_keys(t, util.set {'step', 'next_batch', 'accum', 'optimizer', 'clip', 'lr'}, 'model:train_step')
  if self.auto then require('ds.memplan').resolve(self, t, M) end
  local accum = t.accum
  if accum ~= nil and (math.type(accum) ~= 'integer' or accum < 1) then util.error('model:train_step: accum must be an integer >= 1') end
  accum = M.job_value('grad_accum', accum, 'model:train_step accum')
  if core.report_step and math.type(t.step) == 'integer' then core.report_step(t.step) end -- hang detection
  self:zero_grad()
  local scale = self.scaler and self.scaler:scale() or 1.0
  local loss, tokens = 0, 0
  for micro = 1, accum do
    local x, y = t.next_batch(micro)
    -- Each rank holds rows [rank * B, (rank + 1) * B) of the global batch (ds.data's
    -- split): dropout keyed by global row draws the single-rank run's masks.
    local row0 = self.rank * x:size(1)
    local run = {train = true, step = t.step, micro = micro, row0 = row0}
    loss = loss + self:forward_backward(x, y, run, scale / accum) / accum
    tokens = tokens + x:numel()
  end
  -- gradients averaged over the ranks; the loss too, in rank order
  self.zero:reduce()
  loss = self.zero:mean(loss)
  -- Clipping is fused into the optimizer's pass (the same bits as clip_grad_norm first).
  local gn = self:grad_norm()
  if self.scaler then
    local overflow = core.grad_overflow(gn)
    self.scaler:update(overflow)
    if overflow then
      return {loss = loss, grad_norm = gn, lr = t.lr or t.optimizer.lr, tokens = tokens,
              loss_scale = scale, skipped = true}
    end
    gn = gn / scale -- powers of two: exact
  end
  local clip = M.job_value('gradient_clipping', t.clip, 'model:train_step clip')
  local lr = t.optimizer:step(t.lr, clip_factor(gn, clip) / scale)
  return {loss = loss, grad_norm = gn, lr = lr, tokens = tokens, loss_scale = scale, skipped = false}
end

-- Every train_step reports its step to the launcher (ds.monitor, docs/monitoring.md).
do
  local monitor = require 'ds.monitor'
  local train_step = Model.train_step
  -- Over the memory limit, or out of a device's memory: the error says what the planner
  -- recommends.
  local function over_budget(r)
    return type(r) == 'string' and (r:find('memory_limit', 1, true) or r:find('out of %S+ memory'))
  end
  local function explained(self, t)
    local first
    local tt = setmetatable({next_batch = function(micro)
      local x, y = t.next_batch(micro)
      first = first or {x, y}
      return x, y
    end}, {__index = t})
    local ok, r = pcall(train_step, self, tt)
    if ok then return r end
    if over_budget(r) and first then
      r = r .. '\n' .. require('ds.memplan').advice(self, first[1], first[2], t)
    end
    error(r, 0)
  end
  function Model:train_step(t)
    local t0 = core.now()
    local r = explained(self, t)
    monitor.train_step_done(self, t, r, t0)
    return r
  end
end

return M
