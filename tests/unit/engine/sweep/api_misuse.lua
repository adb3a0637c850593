-- Every function of the ds library and every method (and the metamethods a script can
-- reach) of each kind of object a script can hold, called with argument lists no caller should pass: wrong
-- types, nil, negative, huge, NaN, foreign objects. Each call runs under pcall; a Lua
-- error is the right answer, and so is success where the arguments are ignored. What
-- must never happen is what pcall cannot catch: a crash, an abort, a sanitizer report.
-- Run from an empty directory: a path argument such as "x" may create a file.
-- Prints "swept N calls over M objects" at the end, which the test driver checks.
local ds = require 'ds'

local calls = 0
local current = '?'
local function try(f, ...)
  calls = calls + 1
  local ok, err = pcall(f, ...)
  if not ok and type(err) ~= 'string' then
    error(('%s: an error that is not a message (%s)'):format(current, type(err)))
  end
end

-- One object of each kind a script can hold; each must build, or the sweep would miss it.
local function build(what, f)
  local ok, obj = pcall(f)
  if not ok then error(('building the %s to sweep: %s'):format(what, obj)) end
  return obj
end
local tensor = ds.tensor('fp32', 2, 3)
local ints = ds.tensor('int32', 2, 3)
local xent = ds.crossentropy_new()
local scaler = build('loss scaler', function() return ds.loss_scaler {} end)
local embed = build('embedding stage', function()
  return ds.Stage {ds.nn.Embedding {vocab = 8, d = 4}, name = 'embed'} end)
local head = build('head stage', function() return ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}, name = 'head'} end)
local model = build('model', function() return ds.Model {embed, head, criterion = ds.nn.CrossEntropy()} end)
local opt = build('optimizer', function() return ds.optim.AdamW {model, lr = 1e-3} end)
local ids = ds.tensor('int32', 2, 3)
build('a training step', function() model:forward(ids, ids); model:backward(); opt:step(1e-3) end)
build('a checkpoint', function() model:save('ckpt', opt, {step = 1}) end)
local reader = build('checkpoint reader', function() return ds.ckpt_open('ckpt') end)
local writer = build('checkpoint writer', function() return ds.ckpt_writer('ckpt2', 1, 0, 1) end)
local zmodel = build('ZeRO-3 model', function()
  return ds.Model {ds.Stage {ds.nn.Embedding {vocab = 8, d = 4}, name = 'zembed', zero = 3},
                   ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}, name = 'zhead', zero = 2},
                   criterion = ds.nn.CrossEntropy()}
end)
local zopt = build('ZeRO optimizer', function() return ds.optim.AdamW {zmodel, lr = 1e-3} end)
build('a ZeRO step', function() zmodel:forward(ids, ids); zmodel:backward(); zopt:step(1e-3) end)
-- 16-bit working copies, a loss scaler (fp16), checkpointed attention blocks, dropout.
local mixed = build('mixed-precision model', function()
  return ds.Model {
    ds.Stage {ds.nn.Embedding {name = 'wte', vocab = 8, d = 8},
              ds.nn.PositionEmbedding {name = 'wpe', context = 3, d = 8},
              name = 'membed', precision = 'bf16'},
    ds.Stage {ds.nn.TransformerBlock {name = 'h0', d = 8, heads = 2, dropout = 0.1},
              ds.nn.TransformerBlock {name = 'h1', d = 8, heads = 2}, name = 'mblocks',
              checkpoint = 'full', precision = 'fp16'},
    ds.Stage {ds.nn.LayerNorm {name = 'ln_f', d = 8}, ds.nn.Linear {name = 'lm', ['in'] = 8, out = 8},
              name = 'mhead'},
    criterion = ds.nn.CrossEntropy()}
end)
local mopt = build('SGD optimizer', function() return ds.optim.SGD {mixed, lr = 1e-2, momentum = 0.9} end)
build('a mixed step', function() mixed:forward(ids, ids); mixed:backward(); mopt:step(1e-2) end)
build('a token file', function() ds.data.write_tokens('t.tok', {1, 2, 3, 4, 5, 6, 7, 0}, {vocab = 8}) end)
local loader = build('data loader', function() return ds.data.open {path = 't.tok', context = 2, batch = 1} end)
build('a safetensors file', function() ds.safetensors.save('w.safetensors', {w = tensor}) end)

local ARGS = {
  {}, {nil}, {nil, nil, nil}, {0}, {-1}, {1}, {2 ^ 53}, {math.maxinteger}, {math.mininteger},
  {0 / 0}, {1 / 0}, {-1 / 0}, {1e308}, {''}, {'x'}, {('z'):rep(5000)}, {'fp32'}, {'int32'},
  {{}}, {{1, 2, 3}}, {{-1, 0}}, {{x = 1}}, {true}, {false}, {function() end}, {tensor},
  {ints}, {xent}, {scaler}, {'x', 'y'}, {{}, {}}, {1, 1, 1}, {-1, -1}, {'fp32', -1},
  {'fp32', 0}, {'fp32', 1e12}, {'fp32', {1e6, 1e6, 1e6}}, {'int32', 2, 3, 4, 5, 6, 7, 8, 9},
  {tensor, tensor}, {tensor, ints}, {ints, tensor}, {tensor, 1.5}, {{}, 'x', 3},
}

-- Left out: calls that wait for peers, raise by design, or are slow by design.
local SKIP = {
  ['ds.barrier'] = true, ['ds._core.barrier'] = true, ['ds._core.comm.barrier'] = true,
  ['ds.error'] = true, ['ds.util.error'] = true, -- raise what they are given, by design
  -- with {} it builds the whole GPT-2 124M (its defaults): seconds and gigabytes per
  -- call; its config is swept through ds.gpt.config
  ['ds.gpt.GPT'] = true,
}

local function sweep_fn(name, f)
  if SKIP[name] then return end
  current = name
  for _, a in ipairs(ARGS) do try(f, table.unpack(a, 1, 9)) end
end

local function sweep_table(t, name, depth, seen)
  if seen[t] or depth > 3 then return end
  seen[t] = true
  local keys = {}
  for k in pairs(t) do if type(k) == 'string' then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = rawget(t, k)
    if type(v) == 'function' then sweep_fn(name .. '.' .. k, v)
    elseif type(v) == 'table' then sweep_table(v, name .. '.' .. k, depth + 1, seen) end
  end
end

-- The functions a script reaches on obj, by name: its methods (its metatable's __index
-- table, or its own fields for a Lua object) and, with meta, the metamethods plain Lua can
-- reach (__close through a <close> variable, __tostring, ...; not __gc: getmetatable gives
-- a userdata's class name, only the debug library, used here to list them, reaches it).
local function callables(obj, meta)
  local mt = debug.getmetatable(obj)
  local found = {}
  local function add(t)
    for k, v in pairs(t) do
      if type(k) == 'string' and type(v) == 'function' and k ~= '__gc' then found[k] = v end
    end
  end
  if type(mt) == 'table' then
    if meta then add(mt) end
    if type(mt.__index) == 'table' then add(mt.__index) end
  end
  if type(obj) == 'table' then add(obj) end
  local keys = {}
  for k in pairs(found) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys, found
end

-- Each function with the object, then without it or with another kind of object first.
local function sweep_object(obj, name)
  local keys, found = callables(obj, true)
  for _, k in ipairs(keys) do
    current = name .. ':' .. k
    for _, a in ipairs(ARGS) do
      try(found[k], obj, table.unpack(a, 1, 9))
      try(found[k], table.unpack(a, 1, 9))
    end
  end
end

-- A finalizer that resurrects a criterion after the stage whose output it holds as its
-- logits was freed in the same collection (finalizers run in reverse order of
-- creation: here the tensors, the stage, then the keeper, then the criterion).
local function resurrection()
  local crit = ds.crossentropy_new()
  local outcome
  local keeper = setmetatable({}, {__gc = function()
    current = 'resurrected CrossEntropy:backward'
    outcome = select(2, pcall(crit.backward, crit))
  end})
  local stage = ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}, name = 'late'}
  local logits = stage:forward(ds.tensor('fp32', 2, 4))
  crit:forward(logits, ds.tensor('int32', 2))
  keeper, stage, logits = nil, nil, nil
  return function() return outcome end
end

-- The same with a stage whose last input, younger than the keeper, was freed.
local function resurrected_stage()
  local stage = ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}, name = 'kept'}
  local dout = ds.tensor('fp32', 2, 8)
  local outcome
  local keeper = setmetatable({}, {__gc = function()
    current = 'resurrected stage:backward'
    outcome = select(2, pcall(stage.backward, stage, dout))
  end})
  stage:forward(ds.tensor('fp32', 2, 4))
  keeper = nil
  return function() return outcome end
end

sweep_table(ds, 'ds', 0, {})
for _, name in ipairs {'ds.gpt', 'ds.synth', 'ds.util', 'ds.optim', 'ds.nn', 'ds.model'} do
  sweep_table(require(name), name, 0, {})
end
local objects = {tensor = tensor, ints = ints, xent = xent, scaler = scaler, embed = embed,
                 head = head, model = model, opt = opt, reader = reader, writer = writer,
                 loader = loader, layer = ds.nn.Linear {['in'] = 2, out = 2},
                 zmodel = zmodel, zopt = zopt, zero = zmodel.zero, mixed = mixed, mopt = mopt,
                 mblocks = mixed.stages[2]}
assert(type(zmodel.zero) == 'userdata', 'the ZeRO-3 model has no ZeRO object to sweep')
local names = {}
for name in pairs(objects) do names[#names + 1] = name end
table.sort(names) -- a fixed order: the same calls every run
for _, name in ipairs(names) do sweep_object(objects[name], name) end
-- Then the methods in random order with arguments that could be right (stage indices,
-- the batch, real tensors, option tables): protocols broken the way a script can break
-- them, such as a hook called twice or a backward after a release. Seeded: the same
-- sequence every run.
local dout8 = ds.tensor('fp32', 2, 3, 8)
local PLAUSIBLE = {
  {}, {1}, {2}, {3}, {0}, {ids, ids}, {ids, ids, {train = true, step = 2}}, {ids}, {dout8},
  {tensor}, {1e-3}, {0.5}, {true}, {false}, {{lr = 1e-3}}, {{lr = 1e-3, t = 1}}, {1, 2},
  {'ckpt', opt}, {'ckpt3', zopt, {step = 3}}, {'w'}, {'wte.weight'}, {'weight', true},
}
local methods = {}
for _, name in ipairs(names) do
  local keys, found = callables(objects[name], false)
  for _, k in ipairs(keys) do methods[#methods + 1] = {name = name, obj = objects[name], key = k, f = found[k]} end
end
math.randomseed(tonumber(os.getenv('SWEEP_SEED')) or 20261202) -- another seed: explore
for _ = 1, tonumber(os.getenv('SWEEP_CALLS')) or 6000 do
  local m = methods[math.random(#methods)]
  current = ('random %s:%s'):format(m.name, m.key)
  local a = PLAUSIBLE[math.random(#PLAUSIBLE)]
  try(m.f, m.obj, table.unpack(a, 1, 4))
end

local outcomes = {criterion = resurrection(), stage = resurrected_stage()}
collectgarbage()
collectgarbage()
for what, outcome in pairs(outcomes) do
  calls = calls + 1
  if not tostring(outcome()):find('was freed') then
    error(('the resurrected %s did not refuse: %s'):format(what, tostring(outcome())))
  end
end

-- Still working after all that.
local t = ds.tensor('fp32', 3)
t:fill(2)
assert(t:sum() == 6, 'a fresh tensor after the sweep sums wrong')
print(('swept %d calls over %d objects'):format(calls, #names))
