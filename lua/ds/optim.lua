-- Optimizers and learning-rate schedules. An optimizer steps each stage's flat buffer
-- in C (per parameter: weight decay only where the parameter's decay flag says, i.e.
-- not on biases and LayerNorm weights).
local util = require 'ds.util'

local optim = {}

local function stages_of(model, what)
  if type(model) ~= 'table' or type(model.stages) ~= 'table' then
    util.errorf('%s: the first field must be a ds.Model', what)
  end
  return model.stages
end

local AdamW = {}
AdamW.__index = AdamW

-- ds.optim.AdamW{model, lr=, betas={b1, b2}, eps=, weight_decay=}
function optim.AdamW(cfg)
  local w = 'ds.optim.AdamW'
  util.check_keys(cfg, util.set {'lr', 'betas', 'eps', 'weight_decay'}, w)
  local betas = cfg.betas or {0.9, 0.999}
  if type(betas) ~= 'table' or type(betas[1]) ~= 'number' or type(betas[2]) ~= 'number'
     or betas[1] < 0 or betas[1] >= 1 or betas[2] < 0 or betas[2] >= 1 then
    util.error(w .. ': betas must be {b1, b2} with 0 <= b < 1')
  end
  return setmetatable({model = cfg[1], stages = stages_of(cfg[1], w), lr = util.num(cfg, 'lr', w, 1e-3, 0),
    beta1 = betas[1], beta2 = betas[2], eps = util.num(cfg, 'eps', w, 1e-8, 0),
    weight_decay = util.num(cfg, 'weight_decay', w, 0.0, 0), t = 0}, AdamW)
end

-- One step with learning rate lr (default: the configured one); grad_scale (default 1)
-- multiplies the gradients first (clipping, fused: see Model:train_step). Returns the lr.
function AdamW:step(lr, grad_scale)
  self.t = self.t + 1
  local c = {lr = lr or self.lr, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps,
             weight_decay = self.weight_decay, t = self.t, grad_scale = grad_scale or 1.0}
  if self.model.zero then self.model.zero:adamw(c) -- the rank's shards (docs/zero.md)
  else for _, s in ipairs(self.stages) do s:adamw_step(c) end end
  return c.lr
end

local SGD = {}
SGD.__index = SGD

-- ds.optim.SGD{model, lr=, momentum=, weight_decay=}
function optim.SGD(cfg)
  local w = 'ds.optim.SGD'
  util.check_keys(cfg, util.set {'lr', 'momentum', 'weight_decay'}, w)
  return setmetatable({model = cfg[1], stages = stages_of(cfg[1], w), lr = util.num(cfg, 'lr', w, 1e-2, 0),
    momentum = util.num(cfg, 'momentum', w, 0.0, 0, 1),
    weight_decay = util.num(cfg, 'weight_decay', w, 0.0, 0), t = 0}, SGD)
end

function SGD:step(lr, grad_scale)
  self.t = self.t + 1
  local c = {lr = lr or self.lr, momentum = self.momentum, weight_decay = self.weight_decay,
             grad_scale = grad_scale or 1.0}
  if self.model.zero then self.model.zero:sgd(c)
  else for _, s in ipairs(self.stages) do s:sgd_step(c) end end
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
