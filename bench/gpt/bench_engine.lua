-- The engine's training speed on one rank:
--   dsrun run bench/gpt/bench_engine.lua [model=all|gpt2|small] [B=4] [T=64] [steps=5]
--                                        [warmup=2] [threads=2] [checkpoint=none]
--                                        [precision=fp32|bf16|fp16] [stages=blocks|all]
--                                        [dropout=0]
-- checkpoint= applies to the blocks (what a job's checkpointing does to gpt.GPT), or with
-- stages=all to the embedding and the head too (their spans ending in an embedding or the
-- head's Linear keep its output and do not run it again: docs/engine.md). dropout= is the
-- GPT config's (embeddings, residual branches and attention probabilities; GPT-2 0.1).
-- A step is what train.lua does: zero grads, forward, backward, clip at 1.0, AdamW
-- (betas 0.9/0.95, weight decay 0.1). Random tokens: only speed is measured. GFLOP/s
-- counts 6 * params * tokens + 12 * layers * d * T * tokens (as bench/kernels and
-- bench/gpt/torch_gpt.py do); tokens/s and GFLOP/s use the best step. Prints a table,
-- then one JSON object per line per configuration.
local ds = require 'ds'
local gpt = require 'ds.gpt'

local MODELS = {
  ['gpt2-124M'] = {vocab = 50257, layers = 12, heads = 12, d = 768},
  small = {vocab = 257, layers = 4, heads = 4, d = 256},
}

local S = {model = 'all', B = 4, T = 64, steps = 5, warmup = 2, threads = 2, checkpoint = 'none',
           precision = 'fp32', stages = 'blocks', dropout = 0}
for _, a in ipairs(arg) do
  local k, v = a:match('^(%w+)=(.*)$')
  if not k or S[k] == nil then error("argument '" .. a .. "': expected one of model=, B=, T=, steps=, warmup=, threads=, checkpoint=, precision=, stages=, dropout=") end
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
if S.stages ~= 'blocks' and S.stages ~= 'all' then error("stages=" .. tostring(S.stages) .. ": expected blocks or all") end
if S.threads > 0 then ds.set_threads(S.threads) end

local names = S.model == 'all' and {'gpt2-124M', 'small'} or {S.model == 'gpt2' and 'gpt2-124M' or S.model}

local function median(t)
  local c = table.move(t, 1, #t, 1, {})
  table.sort(c)
  return c[(#c + 1) // 2]
end

local function bench(name)
  local shape = MODELS[name] or error('unknown model ' .. name)
  local cfg = {vocab = shape.vocab, context = S.T, layers = shape.layers, heads = shape.heads, d = shape.d, dropout = S.dropout}
  -- precision: every stage's working copy (docs/precision.md); the kernels compute in
  -- fp32 either way, so this measures what the 16-bit copies cost or save. No loss
  -- scaler: speed only.
  local P16 = S.precision
  local ends = S.stages == 'all' and S.checkpoint or nil
  local m = gpt.GPT(cfg, {seed = 1, embed = {checkpoint = ends, precision = P16},
                          blocks = {checkpoint = S.checkpoint, precision = P16},
                          head = {checkpoint = ends, precision = P16}})
  local opt = ds.optim.AdamW {m, lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1}
  local x, y = ds.tensor('int32', S.B, S.T), ds.tensor('int32', S.B, S.T)
  math.randomseed(7)
  for i = 1, S.B * S.T do x:set(i, math.random(0, cfg.vocab - 1)); y:set(i, math.random(0, cfg.vocab - 1)) end
  local times, parts = {}, {fwd = {}, bwd = {}, opt = {}}
  local loss0, loss
  ds.memory_reset_peaks()
  for step = 1, S.warmup + S.steps do
    local t0 = ds.now()
    m:zero_grad()
    loss = m:forward(x, y, {step = step})
    local t1 = ds.now()
    m:backward(1.0)
    local t2 = ds.now()
    local gn = m:grad_norm() -- clip at 1.0, fused into AdamW's pass as train_step does
    opt:step(nil, gn > 1.0 and 1.0 / (gn + 1e-6) or 1.0)
    local t3 = ds.now()
    loss0 = loss0 or loss
    if step > S.warmup then
      times[#times + 1] = t3 - t0
      parts.fwd[#parts.fwd + 1] = t1 - t0
      parts.bwd[#parts.bwd + 1] = t2 - t1
      parts.opt[#parts.opt + 1] = t3 - t2
    end
  end
  local best = math.min(table.unpack(times))
  local N = S.B * S.T
  local P = m:num_parameters()
  local flops = gpt.flops_per_token(cfg, S.T, P) * N
  local mem = ds.memory()
  local r = {
    bench = 'engine', model = name, B = S.B, T = S.T, threads = ds.threads(), params = P,
    blas_core = ds.blas().core,
    steps = S.steps, checkpoint = S.checkpoint, precision = S.precision, stages = S.stages,
    dropout = S.dropout,
    step_ms_best = best * 1e3, step_ms_median = median(times) * 1e3,
    forward_ms_median = median(parts.fwd) * 1e3, backward_ms_median = median(parts.bwd) * 1e3,
    clip_adamw_ms_median = median(parts.opt) * 1e3,
    tokens_per_s = N / best, gflop_per_s = flops / best * 1e-9,
    mem_peak_bytes = mem.total.peak, activations_peak_bytes = mem.activations.peak,
    loss_first = loss0, loss_last = loss,
  }
  m:release()
  return r
end

local rows = {}
for _, n in ipairs(names) do rows[#rows + 1] = bench(n) end

local blas = ds.blas()
print(string.format('dslaunch engine, %d threads, B=%d T=%d, %d steps after %d warm-up; OpenBLAS kernels %s (%s)',
  ds.threads(), S.B, S.T, S.steps, S.warmup, blas.core, blas.why))
print(string.format('%-10s %11s %9s %9s %8s %8s %8s %9s %8s %10s', 'model', 'params', 'step ms', 'median',
  'fwd ms', 'bwd ms', 'opt ms', 'tokens/s', 'GFLOP/s', 'peak MiB'))
for _, r in ipairs(rows) do
  print(string.format('%-10s %11d %9.1f %9.1f %8.1f %8.1f %8.1f %9.1f %8.1f %10.1f', r.model, r.params, r.step_ms_best,
    r.step_ms_median, r.forward_ms_median, r.backward_ms_median, r.clip_adamw_ms_median, r.tokens_per_s,
    r.gflop_per_s, r.mem_peak_bytes / 2^20))
end

local function json(r)
  local keys = {}
  for k in pairs(r) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for _, k in ipairs(keys) do
    local v = r[k]
    local s = type(v) == 'string' and string.format('%q', v)
      or math.type(v) == 'integer' and tostring(v) or string.format('%.4f', v)
    out[#out + 1] = string.format('"%s":%s', k, s)
  end
  return '{' .. table.concat(out, ',') .. '}'
end
for _, r in ipairs(rows) do print(json(r)) end
