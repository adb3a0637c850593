-- Temporary: the ZeRO hooks around a ds.Model and its optimizer, until lua/ds/model.lua
-- calls them itself.
local ds = require 'ds'

-- (Until the engine's model.lua calls the ZeRO hooks itself.)
return function(model, opt, opts)
  local z = {bucket = opts and opts.bucket, prefetch = not (opts and opts.prefetch == 0)}
  for k, s in ipairs(model.stages) do z[k] = s end
  z = ds._core.zero_new(z)
  model.zero = z
  function model:predict(x, run)
    run = run or {}
    local train = run.train ~= false
    for k, s in ipairs(self.stages) do
      z:before_forward(k)
      x = s:forward(x, train, run.step or 0, run.micro or 0)
      z:after_forward(k)
    end
    return x
  end
  function model:backward(scale)
    local d = self.criterion:backward(scale or 1.0)
    for k = #self.stages, 1, -1 do
      z:before_backward(k)
      d = self.stages[k]:backward(d)
      z:after_backward(k)
    end
  end
  function model:zero_grad() z:zero_grad() end
  function model:grad_norm() return math.sqrt(z:grad_sumsq()) end
  function model:clip_grad_norm(max_norm)
    local n = self:grad_norm()
    if max_norm and max_norm > 0 and n > max_norm then z:scale_grads(max_norm / (n + 1e-6)) end
    return n
  end
  function model:train_step(t)
    local accum = t.accum or 1
    self:zero_grad()
    local loss, tokens = 0, 0
    for micro = 1, accum do
      local x, y = t.next_batch(micro)
      loss = loss + self:forward(x, y, {train = true, step = t.step, micro = micro}) / accum
      self:backward(1.0 / accum)
      tokens = tokens + x:numel()
    end
    z:reduce()
    loss = z:mean(loss)
    local gn = self:clip_grad_norm(t.clip)
    local lr = t.optimizer:step(t.lr)
    return {loss = loss, grad_norm = gn, lr = lr, tokens = tokens}
  end
  function opt:step(lr)
    self.t = self.t + 1
    if self.momentum then
      z:sgd {lr = lr or self.lr, momentum = self.momentum, weight_decay = self.weight_decay}
      return lr or self.lr
    end
    local c = {lr = lr or self.lr, beta1 = self.beta1, beta2 = self.beta2, eps = self.eps,
               weight_decay = self.weight_decay, t = self.t}
    z:adamw(c)
    return c.lr
  end
  -- Collective: every rank writes its own range of each stage's arrays.
  function model:save(dir, _, state)
    local core = ds._core
    local w = core.ckpt_writer(dir, state.step, ds.rank(), ds.world_size())
    for k, s in ipairs(self.stages) do
      for _, a in ipairs(z:arrays(k, 'save')) do w:add(s:info().name .. '/' .. a.name, a.tensor, a.total, a.begin) end
    end
    state.optimizer_t = opt.t
    local ok, err = w:commit(state, function() core.comm.barrier() end)
    if not ok then error('save ' .. dir .. ': ' .. tostring(err)) end
  end
  -- Reads back what this rank keeps, at any world size and ZeRO stage.
  function model:load(dir, _)
    local ck, err = ds._core.ckpt_open(dir)
    if not ck then error('load ' .. dir .. ': ' .. tostring(err)) end
    local state = ck:state()
    for k, s in ipairs(self.stages) do
      for _, a in ipairs(z:arrays(k, 'load', opt.momentum and 'sgd' or 'adamw')) do
        local ok, e = ck:read(s:info().name .. '/' .. a.name, a.begin, a.tensor)
        if not ok then error('load ' .. dir .. ': ' .. tostring(e)) end
      end
    end
    opt.t = state.optimizer_t
    ck:close()
    return state
  end
end
