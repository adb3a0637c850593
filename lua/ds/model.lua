-- Stages and models. A stage is an ordered list of layers with its own options; its
-- parameters and gradients are one flat buffer each. A model is an ordered list of
-- stages plus a criterion; forward and backward walk the stages (one C call each).
local util = require 'ds.util'
local core = require 'ds._core'
local nn = require 'ds.nn'

local M = {}

local STAGE_OPTS = util.set {'name', 'zero', 'checkpoint', 'precision', 'seed'}
local PRECISIONS = util.set {'fp32', 'bf16', 'fp16'}

-- Validated here with the script's line in the message; the C side checks again.
local function check_stage_opts(o, what)
  util.check_keys(o, STAGE_OPTS, what)
  if o.zero ~= nil and (math.type(o.zero) ~= 'integer' or o.zero < 0 or o.zero > 3) then
    util.errorf('%s: zero must be 0, 1, 2 or 3, got %s', what, tostring(o.zero))
  end
  local c = o.checkpoint
  if c ~= nil and c ~= 'none' and c ~= 'full' and not (math.type(c) == 'integer' and c >= 1)
     and not (type(c) == 'table' and math.type(c.every) == 'integer' and c.every >= 1)
     and not (type(c) == 'string' and (tonumber(c:match('^every:(%d+)$')) or 0) >= 1) then
    util.errorf("%s: checkpoint must be 'none', 'full', N >= 1, 'every:N' or {every = N}, got %s", what, tostring(c))
  end
  if o.precision ~= nil and not PRECISIONS[o.precision] then
    util.errorf("%s: precision must be 'fp32', 'bf16' or 'fp16', got %s", what, tostring(o.precision))
  end
  if o.seed ~= nil and math.type(o.seed) ~= 'integer' then
    util.errorf('%s: seed must be an integer', what)
  end
end
M.check_stage_opts = check_stage_opts

-- The job's [engine] defaults, which the launcher passes to every rank as environment
-- variables (DS_ENGINE_ZERO, _PRECISION, _CHECKPOINT, _MICRO_BATCH, _GRAD_ACCUM, _SEED,
-- and the fp16 loss scaler's _INITIAL_SCALE_POWER, _LOSS_SCALE_WINDOW, _HYSTERESIS,
-- _MIN_LOSS_SCALE, and ZeRO's _REDUCE_BUCKET_SIZE); without them (`dsrun run`), zero 0,
-- fp32, no checkpointing, 1, 1, seed 1234, DeepSpeed's scaler defaults (2^16, 1000, 2,
-- 1) and 2^20-element buckets.
local defaults
function M.defaults()
  if defaults then return defaults end
  local function env(name, parse, dflt)
    local v = os.getenv('DS_ENGINE_' .. name)
    if v == nil or v == '' then return dflt end
    local x = parse(v)
    if x == nil then util.errorf('environment DS_ENGINE_%s=%s is not valid', name, v) end
    return x
  end
  local function int(v) return math.tointeger(tonumber(v)) end
  local function ckpt(v)
    if v == 'none' or v == 'full' then return v end
    local n = tonumber(v:match('^every:(%d+)$'))
    return n and n >= 1 and math.tointeger(n) or nil
  end
  defaults = {
    zero = env('ZERO', int, 0), precision = env('PRECISION', function(v) return PRECISIONS[v] and v end, 'fp32'),
    checkpoint = env('CHECKPOINT', ckpt, 'none'), micro_batch = env('MICRO_BATCH', int, 1),
    grad_accum = env('GRAD_ACCUM', int, 1), seed = env('SEED', int, 1234),
    loss_scaler = {init_scale = 2.0 ^ env('INITIAL_SCALE_POWER', int, 16),
                   scale_window = env('LOSS_SCALE_WINDOW', int, 1000),
                   hysteresis = env('HYSTERESIS', int, 2), min_scale = env('MIN_LOSS_SCALE', int, 1)},
    zero_bucket = env('REDUCE_BUCKET_SIZE', int, 1 << 20),
  }
  check_stage_opts({zero = defaults.zero, precision = defaults.precision, checkpoint = defaults.checkpoint,
                    seed = defaults.seed}, 'engine defaults (DS_ENGINE_*)')
  return defaults
end

local function checkpoint_value(c)
  if type(c) == 'string' and c:match('^every:') then return math.tointeger(tonumber(c:match('^every:(%d+)$'))) end
  return c
end

-- ds.Stage{layer1, layer2, ..., name=, zero=, checkpoint=, precision=, seed=}; options
-- not given come from the job's [engine] defaults (M.defaults()).
function M.Stage(spec)
  if type(spec) ~= 'table' then util.error('ds.Stage: expected a table {layer, ..., options}') end
  check_stage_opts(spec, 'ds.Stage')
  if #spec == 0 then util.error('ds.Stage: no layers') end
  local d = M.defaults()
  local function pick(v, dv) if v == nil then return dv end return v end
  local desc = {name = spec.name or 'stage', zero = pick(spec.zero, d.zero),
                checkpoint = checkpoint_value(pick(spec.checkpoint, d.checkpoint)),
                precision = pick(spec.precision, d.precision), seed = pick(spec.seed, d.seed)}
  for i, l in ipairs(spec) do
    if not nn.is_layer(l) then util.errorf('ds.Stage: element %d is not a layer (%s)', i, type(l)) end
    desc[i] = l
  end
  return core.stage_new(desc)
end

local Model = {}
Model.__index = Model

-- ds.Model{stage1, stage2, ..., criterion = nn.CrossEntropy(), zero_bucket = elements,
-- zero_prefetch = true, loss_scaler = {init_scale=, scale_window=, hysteresis=,
-- min_scale=, ...}}. With more than one rank, or any stage at ZeRO > 0, the model
-- trains data-parallel through ds._core.zero_new (docs/zero.md): hooks around each
-- stage's forward and backward, the reduction at the accumulation boundary, the global
-- norm and the sharded optimizer step. A model with an fp16 stage trains with a dynamic
-- loss scaler (DeepSpeed's defaults unless loss_scaler says otherwise; docs/precision.md).
function M.Model(spec)
  util.check_keys(spec, util.set {'criterion', 'zero_bucket', 'zero_prefetch', 'loss_scaler'}, 'ds.Model')
  local m = setmetatable({stages = {}, criterion = spec.criterion or nn.CrossEntropy()}, Model)
  for i, s in ipairs(spec) do
    if type(s) ~= 'userdata' or not pcall(s.info, s) then
      util.errorf('ds.Model: element %d is not a ds.Stage', i)
    end
    m.stages[i] = s
  end
  if #m.stages == 0 then util.error('ds.Model: no stages') end
  if spec.zero_bucket ~= nil and (math.type(spec.zero_bucket) ~= 'integer' or spec.zero_bucket < 1) then
    util.error('ds.Model: zero_bucket must be an integer >= 1 (elements)')
  end
  m.zero_opts = {bucket = spec.zero_bucket or M.defaults().zero_bucket, prefetch = spec.zero_prefetch ~= false}
  local fp16 = false
  for _, s in ipairs(m.stages) do fp16 = fp16 or s:info().precision == 'fp16' end
  if spec.loss_scaler ~= nil and type(spec.loss_scaler) ~= 'table' then
    util.error('ds.Model: loss_scaler must be a table of options')
  end
  if fp16 or spec.loss_scaler then m.scaler = core.loss_scaler(spec.loss_scaler or M.defaults().loss_scaler) end
  -- (A ds._core without the runtime's parts, as the engine's unit tests build it, has
  -- no world size and no ZeRO: one rank, stages trained whole.)
  local world = core.world_size and core.world_size() or 1
  local sharded = world > 1
  for _, s in ipairs(m.stages) do sharded = sharded or s:info().zero > 0 end
  if sharded and (core.zero_new or world > 1) then m:zero_state() end
  return m
end

-- The ZeRO object over the stages (made on first use when the model runs without it:
-- one rank, ZeRO off, where it only serves save and load).
function Model:zero_state()
  if not self.zero then
    if not core.zero_new then util.error('this ds._core has no ZeRO (runtime/zero)') end
    local t = {bucket = self.zero_opts.bucket, prefetch = self.zero_opts.prefetch}
    for k, s in ipairs(self.stages) do t[k] = s end
    self.zero = core.zero_new(t)
  end
  return self.zero
end

-- Output of the last stage (logits for a GPT). run: {train=, step=, micro=, row0=}; row0:
-- global batch row of x's first row (data parallel: rank * local rows), keys dropout.
function Model:predict(x, run)
  run = run or {}
  local train = run.train ~= false
  local z = self.zero
  for k, s in ipairs(self.stages) do
    if z then z:before_forward(k) end
    x = s:forward(x, train, run.step or 0, run.micro or 0, run.row0 or 0)
    if z then z:after_forward(k) end
  end
  return x
end

-- Forward through every stage and the criterion; returns the mean loss.
function Model:forward(x, targets, run)
  self.output = self:predict(x, run)
  return self.criterion:forward(self.output, targets)
end

-- Backward of scale * loss (scale = 1/accumulation steps); gradients accumulate.
function Model:backward(scale)
  local d = self.criterion:backward(scale or 1.0)
  local z = self.zero
  for i = #self.stages, 1, -1 do
    if z then z:before_backward(i) end
    d = self.stages[i]:backward(d)
    if z then z:after_backward(i) end
  end
end

function Model:zero_grad()
  if self.zero then return self.zero:zero_grad() end
  for _, s in ipairs(self.stages) do s:zero_grad() end
end

-- Global gradient norm over every stage, summed in stage order (with ZeRO: over every
-- rank's shard, reduced gradients; every rank gets the same bits).
function Model:grad_norm()
  if self.zero then return math.sqrt(self.zero:grad_sumsq()) end
  local ss = 0
  for _, s in ipairs(self.stages) do ss = ss + s:grad_sumsq() end
  return math.sqrt(ss)
end

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
  if k ~= 1.0 and self.zero then
    self.zero:scale_grads(k)
  elseif k ~= 1.0 then
    for _, s in ipairs(self.stages) do s:scale_grads(k) end
  end
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
  if not z then
    fn()
    -- 16-bit stages: masters made before the write would undo it at the next step.
    if write then for _, s in ipairs(self.stages) do s:sync_master() end end
    return
  end
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
  local z = self:zero_state()
  local w = core.ckpt_writer(dir, state.step, core.rank(), core.world_size())
  for k, s in ipairs(self.stages) do
    for _, a in ipairs(z:arrays(k, 'save')) do w:add(s:info().name .. '/' .. a.name, a.tensor, a.total, a.begin) end
  end
  local saved = {}
  for key, v in pairs(state) do saved[key] = v end
  saved.optimizer_t = optimizer and optimizer.t or 0
  saved.world_size = core.world_size()
  saved.precision = {}
  for _, s in ipairs(self.stages) do saved.precision[s:info().name] = s:info().precision end
  if self.scaler then saved.loss_scaler = self.scaler:state() end
  local ok, err = w:commit(saved, function() core.comm.barrier() end)
  if not ok then util.errorf('model:save %s: %s', dir, tostring(err)) end
end

-- Loads dir's latest checkpoint (or a step directory) into the model and optimizer, at
-- any world size and ZeRO stages; returns the saved state table.
function Model:load(dir, optimizer)
  local z = self:zero_state()
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
  local accum = t.accum or 1
  if math.type(accum) ~= 'integer' or accum < 1 then util.error('model:train_step: accum must be an integer >= 1') end
  self:zero_grad()
  local scale = self.scaler and self.scaler:scale() or 1.0
  local loss, tokens = 0, 0
  for micro = 1, accum do
    local x, y = t.next_batch(micro)
    -- Each rank holds rows [rank * B, (rank + 1) * B) of the global batch (ds.data's
    -- split): dropout keyed by global row draws the single-rank run's masks.
    local row0 = self.zero and core.rank and core.rank() * x:size(1) or 0
    loss = loss + self:forward(x, y, {train = true, step = t.step, micro = micro, row0 = row0}) / accum
    self:backward(scale / accum)
    tokens = tokens + x:numel()
  end
  if self.zero then -- gradients averaged over the ranks; the loss too, in rank order
    self.zero:reduce()
    loss = self.zero:mean(loss)
  end
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
  local lr = t.optimizer:step(t.lr, clip_factor(gn, t.clip) / scale)
  return {loss = loss, grad_norm = gn, lr = lr, tokens = tokens, loss_scale = scale, skipped = false}
end

return M
