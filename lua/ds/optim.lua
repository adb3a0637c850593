-- Optimizers and learning-rate schedules. An optimizer steps each stage's flat buffer
-- in C (per parameter: weight decay only where the parameter's decay flag says, i.e.
-- not on biases and LayerNorm weights).
local util = require 'ds.util'
local core = require 'ds._core'
local model = require 'ds.model'

local optim = {}

local function stages_of(m, what)
  if type(m) ~= 'table' or type(m.stages) ~= 'table' then
    util.errorf('%s: the first field must be a ds.Model', what)
  end
  return m.stages
end

-- The settings without the model (cfg[1]), for ds._core's check.
local function settings(cfg)
  local c = {}
  for k, v in pairs(cfg) do if k ~= 1 then c[k] = v end end
  return c
end

local AdamW = {}
AdamW.__index = AdamW

-- ds.optim.AdamW{model, lr=, betas={b1, b2}, eps=, weight_decay=}: ds._core checks the
-- settings (ranges, unknown keys) with the same function every step reads them with. A
-- setting not given is the job's ([engine] lr, beta1, beta2, eps, weight_decay).
function optim.AdamW(cfg)
  local w = 'ds.optim.AdamW'
  if type(cfg) ~= 'table' then util.errorf('%s: expected a table {model, options}', w) end
  local m = cfg[1]
  stages_of(m, w)
  local o = core.adamw_config(settings(cfg), w)
  -- what the script gave, checked above; the job's for the rest
  local betas = cfg.betas or {}
  o.lr = model.job_value('lr', cfg.lr, w)
  o.beta1 = model.job_value('beta1', cfg.beta1 or betas[1], w)
  o.beta2 = model.job_value('beta2', cfg.beta2 or betas[2], w)
  o.eps = model.job_value('eps', cfg.eps, w)
  o.weight_decay = model.job_value('weight_decay', cfg.weight_decay, w)
  o = core.adamw_config(o, w)
  o.model, o.t = m, 0
  return setmetatable(o, AdamW)
end

-- One step with learning rate lr (default: the configured one); grad_scale (default 1)
-- multiplies the gradients first (clipping, fused: see Model:train_step). Runs on the
-- rank's shards through the model's ZeRO object (docs/zero.md). Returns the lr.
function AdamW:step(lr, grad_scale)
  self.t = self.t + 1
  local c = {lr = lr or self.lr, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps,
             weight_decay = self.weight_decay, t = self.t, grad_scale = grad_scale or 1.0}
  self.model.zero:adamw(c)
  return c.lr
end

local SGD = {}
SGD.__index = SGD

-- ds.optim.SGD{model, lr=, momentum=, weight_decay=}
function optim.SGD(cfg)
  local w = 'ds.optim.SGD'
  if type(cfg) ~= 'table' then util.errorf('%s: expected a table {model, options}', w) end
  local m = cfg[1]
  stages_of(m, w)
  local o = core.sgd_config(settings(cfg), w)
  o.model, o.t = m, 0
  return setmetatable(o, SGD)
end

function SGD:step(lr, grad_scale)
  self.t = self.t + 1
  local c = {lr = lr or self.lr, momentum = self.momentum, weight_decay = self.weight_decay,
             grad_scale = grad_scale or 1.0}
  self.model.zero:sgd(c)
  return c.lr
end

-- Schedules: functions of the 1-based step returning the learning rate.
function optim.constant(cfg)
  util.check_keys(cfg, util.set {'lr'}, 'ds.optim.constant')
  local lr = util.num(cfg, 'lr', 'ds.optim.constant', nil, 0)
  return function() return lr end
end

-- Linear warmup over `warmup` steps to lr, then cosine decay to min_lr at step `total`
-- (held at min_lr after).
function optim.warmup_cosine(cfg)
  local w = 'ds.optim.warmup_cosine'
  util.check_keys(cfg, util.set {'lr', 'min_lr', 'warmup', 'total'}, w)
  local lr = util.num(cfg, 'lr', w, nil, 0)
  local min_lr = util.num(cfg, 'min_lr', w, 0.0, 0)
  local warmup = util.int(cfg, 'warmup', w, 0, 0)
  local total = util.int(cfg, 'total', w, nil, 1)
  if warmup > total then util.errorf('%s: warmup (%d) > total (%d)', w, warmup, total) end
  return function(step)
    if step <= warmup then return lr * step / math.max(warmup, 1) end
    if step >= total then return min_lr end
    local r = (step - warmup) / math.max(total - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * r))
  end
end

-- The job's schedule ([engine] lr_schedule, lr, warmup_type, warmup_steps, warmup_min_lr,
-- min_lr, total_steps: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR), as a
-- function of the 1-based step: step s takes DeepSpeed's formula at iteration i = s - 1.
-- cfg (optional) replaces any of those settings by name.
function optim.schedule(cfg)
  local w = 'ds.optim.schedule'
  cfg = cfg or {}
  local names = {'lr_schedule', 'lr', 'warmup_type', 'warmup_steps', 'warmup_min_lr', 'min_lr', 'total_steps'}
  util.check_keys(cfg, util.set(names), w)
  local c = {}
  for _, n in ipairs(names) do
    local v = cfg[n]
    if v ~= nil then v = core.engine_option(n, v, w) end
    c[n] = model.job_value(n, v, w)
  end
  local kind, lr, lo, W, T = c.lr_schedule, c.lr, c.warmup_min_lr, c.warmup_steps, c.total_steps
  if (kind == 'warmup_decay' or kind == 'warmup_cosine') and T < math.max(W, 1) then
    util.errorf('%s: %s needs total_steps (%d) >= warmup_steps (%d) and >= 1', w, kind, T, W)
  end
  local function warm(i) -- 0..1 over the warmup
    if c.warmup_type == 'log' then return W > 1 and math.log(i + 1) / math.log(W) or 0 end
    return i / W
  end
  return function(step)
    local i = step - 1
    if kind == 'constant' then return lr end
    if i < W then return lo + (lr - lo) * warm(i) end
    if kind == 'warmup' then return lr end
    if kind == 'warmup_decay' then return lo + (lr - lo) * math.max(0, (T - i) / math.max(1, T - W)) end
    local r = (i - W + 1) / math.max(T - W, 1) -- warmup_cosine
    if r >= 1 then return c.min_lr end
    return c.min_lr + (lr - c.min_lr) * 0.5 * (1 + math.cos(math.pi * r))
  end
end

return optim
