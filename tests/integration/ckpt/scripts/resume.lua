-- resume.lua DIR: model:resume end to end on one rank. An empty directory resumes
-- nothing (nil); a run that saves at step 3 and is resumed there by a fresh model ends
-- with bit-identical parameters, optimizer state and loss scale to a run that never
-- stopped (dropout and an fp16 stage, so the random streams and the scaler count); a
-- damaged checkpoint (malformed latest, a truncated shard, another seed) raises instead
-- of starting over.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local synth = require 'ds.synth'
local dir = arg[1]
local cfg = gpt.config {vocab = 32, context = 16, layers = 2, heads = 2, d = 32, dropout = 0.1}

local function build(seed)
  local m = gpt.GPT(cfg, {seed = seed or 7, blocks = {precision = 'fp16'}})
  local opt = ds.optim.AdamW {m, lr = 1e-2}
  local src = synth.progressions {vocab = 32, context = 16, batch = 4, seed = 7}
  return m, opt, src
end

local function train(m, opt, src, from, to)
  local losses = {}
  for step = from, to do
    losses[step] = m:train_step {step = step, accum = 2, optimizer = opt, clip = 1.0,
                                 next_batch = function(micro) return src:batch(step, micro) end}.loss
  end
  return losses
end

local function params(m)
  local out = {}
  for _, p in ipairs(m:parameters()) do out[p.name] = m:param(p.name):to_table() end
  return out
end

local function same(a, b, what)
  for name, xs in pairs(a) do
    for i = 1, #xs do
      if xs[i] ~= b[name][i] then error(string.format('%s: %s[%d] %.9g vs %.9g', what, name, i, xs[i], b[name][i])) end
    end
  end
end

local function expect_error(fn, pattern, what)
  local ok, err = pcall(fn)
  if ok then error(what .. ': resumed without an error') end
  if not tostring(err):find(pattern) then error(what .. ': unexpected message: ' .. tostring(err)) end
end

-- nothing there yet
local m, opt, src = build()
assert(m:resume(dir .. '/none', opt) == nil, 'a missing directory must resume nothing')

-- the uninterrupted run
local ref_losses = train(m, opt, src, 1, 6)
local ref, ref_t, ref_scale = params(m), opt.t, m.scaler:scale()

-- the run that stops at step 3
local a, aopt, asrc = build()
train(a, aopt, asrc, 1, 3)
a:save(dir, aopt, {step = 3})
local b, bopt, bsrc = build(99) -- another init: resume must overwrite all of it ...
expect_error(function() b:resume(dir, bopt) end, 'seed', 'another seed')
b, bopt, bsrc = build()         -- ... but the seeds must agree
local state = b:resume(dir, bopt, {data = bsrc})
assert(state and state.step == 3, 'resume did not return the saved step')
assert(bopt.t == 3, 'optimizer step count not restored: ' .. tostring(bopt.t))
local losses = train(b, bopt, bsrc, state.step + 1, 6)
for step = 4, 6 do
  if losses[step] ~= ref_losses[step] then error(string.format('loss at step %d: %.9g vs %.9g', step, losses[step], ref_losses[step])) end
end
same(ref, params(b), 'after resume')
assert(bopt.t == ref_t and b.scaler:scale() == ref_scale, 'optimizer or loss scaler differ after resume')

-- damage: a malformed latest, then a truncated shard
local f = assert(io.open(dir .. '/latest', 'w')); f:write('garbage\n'); f:close()
expect_error(function() build():resume(dir, nil) end, 'malformed', 'malformed latest')
f = assert(io.open(dir .. '/latest', 'w')); f:write('step-3\n'); f:close()
local shard = dir .. '/step-3/rank-0-of-1.bin'
f = assert(io.open(shard, 'rb')); local bytes = f:read('a'); f:close()
f = assert(io.open(shard, 'wb')); f:write(bytes:sub(1, #bytes - 10)); f:close()
expect_error(function() local c, copt = build(); c:resume(dir, copt) end, 'truncated', 'truncated shard')
print('resume: nil when empty, exact after resume, refuses damage')
