-- Optimizers and learning-rate schedules. An optimizer steps each stage's flat buffer
-- in C (per parameter: weight decay only where the parameter's decay flag says, i.e.
-- not on biases and LayerNorm weights).
local util = require 'ds.util'
local core = require 'ds._core'

local optim = {}

local function stages_of(model, what)
  if type(model) ~= 'table' or type(model.stages) ~= 'table' then
    util.errorf('%s: the first field must be a ds.Model', what)
  end
  return model.stages
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
-- settings (ranges, unknown keys) with the same function every step reads them with.
function optim.AdamW(cfg)
  local w = 'ds.optim.AdamW'
  if type(cfg) ~= 'table' then util.errorf('%s: expected a table {model, options}', w) end
  local model = cfg[1]
  stages_of(model, w)
  local o = core.adamw_config(settings(cfg), w)
  o.model, o.t = model, 0
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
  local model = cfg[1]
  stages_of(model, w)
  local o = core.sgd_config(settings(cfg), w)
  o.model, o.t = model, 0
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

return optim
