-- One rank of the planner's grid test (memplan_grid.c starts W of them per case): a GPT
-- whose three stages (embed, blocks, head) take zero=, checkpoint= and precision= as
-- comma lists (one value for all, or one per stage), trained `steps` AdamW steps; then
-- the allocation counters against the planner's prediction for the same stages and job:
-- model states (params, grads, optimizer) to the byte, activations and the total peak
-- within tol (a fraction; 0, the default: to the byte, as the planner replays the
-- engine's allocations exactly). Rank 0 prints one line per case; a rank that disagrees fails.
-- bench/memplan/run.sh uses it too: json=PATH appends one JSON line per case (measured
-- and predicted bytes per category, the fastest step), check=0 reports without failing.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local synth = require 'ds.synth'
local memplan = require 'ds.memplan'

local S = {zero = '0', checkpoint = 'none', precision = 'fp32', size = 'tiny', steps = 2,
           batch = 4, accum = 1, tol = 0, bucket = 0, name = 'case', json = '', check = 1,
           threads = 0, dropout = 0}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
local SIZES = {
  tiny = {vocab = 64, context = 16, layers = 2, heads = 2, d = 32},
  small = {vocab = 256, context = 32, layers = 4, heads = 4, d = 64},
  gpt2 = {vocab = 50257, context = 256, layers = 12, heads = 12, d = 768}, -- GPT-2 124M, T = 256
}
if S.threads > 0 then ds.set_threads(S.threads) end
local size = assert(SIZES[S.size], 'size: tiny or small')
size.dropout = S.dropout -- > 0: attention dropout (the same lse), the Dropout layers' masks
local cfg = gpt.config(size)

local function per_stage(v)
  local t = {}
  for x in tostring(v):gmatch('[^,]+') do t[#t + 1] = math.tointeger(tonumber(x)) or x end
  while #t < 3 do t[#t + 1] = t[#t] end
  return t
end
local Z, C, P = per_stage(S.zero), per_stage(S.checkpoint), per_stage(S.precision)
local function opts(i) return {zero = Z[i], checkpoint = C[i], precision = P[i]} end
local model = gpt.GPT(cfg, {seed = 1, embed = opts(1), blocks = opts(2), head = opts(3),
                            zero_bucket = S.bucket > 0 and S.bucket or nil})
local opt = ds.optim.AdamW {model, lr = 1e-3}
local src = synth.progressions {vocab = cfg.vocab, context = cfg.context, batch = S.batch, seed = 3}
local x, y = src:batch(1, 1) -- one micro-batch, made once: its lifetime is the script's
local best = math.huge
for step = 1, S.steps do
  local t0 = ds.now()
  model:train_step {step = step, optimizer = opt, accum = S.accum, clip = 1.0,
                    next_batch = function() return x, y end}
  if step > 1 then best = math.min(best, ds.now() - t0) end -- the first makes the optimizer's state
end
local m = ds.memory()
local p = memplan.predict(model, {batch = x:shape(), targets = y:numel(), accum = S.accum,
                                  bucket = S.bucket > 0 and S.bucket or nil}, nil, S.steps)

local bad = {}
local function check(cat, measured, predicted, tol)
  local d = predicted - measured
  if (tol == 0 and d ~= 0) or math.abs(d) > tol * measured then
    bad[#bad + 1] = string.format('%s: measured %d, predicted %d (%+.2f%%)', cat, measured, predicted,
                                  measured > 0 and 100 * d / measured or 0)
  end
  return d
end
for _, cat in ipairs {'params', 'grads', 'optimizer'} do
  check(cat .. ' peak', m[cat].peak, p.categories[cat].peak, 0)
  check(cat .. ' after', m[cat].current, p.categories[cat].after, 0)
end
local da = check('activations peak', m.activations.peak, p.categories.activations.peak, S.tol)
local dt = check('total peak', m.total.peak, p.total_peak, S.tol)
if ds.rank() == 0 or #bad > 0 then
  print(string.format('%-40s W=%d rank %d: total %d predicted %d (%+.2f%%), activations %d (%+.2f%%)%s',
    S.name, ds.world_size(), ds.rank(), m.total.peak, p.total_peak, 100 * dt / m.total.peak,
    m.activations.peak, m.activations.peak > 0 and 100 * da / m.activations.peak or 0,
    #bad > 0 and ('  MISMATCH ' .. table.concat(bad, '; ')) or ''))
end
if S.verbose then
  print(ds.memory_report())
  print(memplan.report(p))
  for _, cat in ipairs(memplan.CATEGORIES) do
    print(string.format('%-12s measured peak %10d predicted %10d', cat, m[cat].peak, p.categories[cat].peak))
  end
end
if S.json ~= '' and ds.rank() == 0 then
  local f = assert(io.open(S.json, 'a'))
  local parts = {}
  for _, cat in ipairs(memplan.CATEGORIES) do
    parts[#parts + 1] = string.format('"%s":{"measured":%d,"predicted":%d}', cat, m[cat].peak, p.categories[cat].peak)
  end
  f:write(string.format('{"name":"%s","world":%d,"zero":"%s","checkpoint":"%s","precision":"%s","batch":%d,' ..
    '"context":%d,"total":{"measured":%d,"predicted":%d},%s,"step_s":%.6f,"recompute_flops":%.6g,"flops":%.6g,' ..
    '"comm_bytes":%.6g}\n', S.name, ds.world_size(), S.zero, S.checkpoint, S.precision, S.batch, cfg.context,
    m.total.peak, p.total_peak, table.concat(parts, ','), best < math.huge and best or 0, p.recompute_flops,
    p.flops, p.comm_bytes))
  f:close()
end
if S.check == 0 then bad = {} end
if #bad > 0 then error('prediction off: ' .. table.concat(bad, '; '), 0) end
