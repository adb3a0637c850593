-- GPT-2 training speed and memory on one GPU, one configuration per run:
--   DS_ENGINE_DEVICE=cuda dsrun run bench/gpu/bench_gpt.lua [model=124M|350M|tiny] [B=8]
--       [T=1024] [steps=5] [warmup=2] [zero=0] [checkpoint=none|full]
--       [precision=bf16|fp16|fp32] [peak_tflops=989]
-- A step is train.lua's (model:train_step: forward, backward, clip at 1.0, AdamW) on
-- random tokens. MFU counts 6N + 6*L*C*T FLOPs per token (N parameters, L layers, C
-- width, T context) against peak_tflops, the GPU's dense 16-bit peak (H100/H200 SXM:
-- 989). Prints one JSON line: tokens/s from the median step, MFU, the peak bytes of
-- every memory category and what the device's caching allocator holds beyond them.
local ds = require 'ds'
local gpt = require 'ds.gpt'

local MODELS = {
  ['124M'] = {vocab = 50257, layers = 12, heads = 12, d = 768},
  ['350M'] = {vocab = 50257, layers = 24, heads = 16, d = 1024},
  tiny = {vocab = 64, layers = 2, heads = 4, d = 64}, -- checks this script on any device
}
local S = {model = '124M', B = 8, T = 1024, steps = 5, warmup = 2, zero = 0, checkpoint = 'none',
           precision = 'bf16', peak_tflops = 989}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  if not k or S[k] == nil then error("argument '" .. a .. "': expected model=, B=, T=, steps=, warmup=, zero=, checkpoint=, precision=, peak_tflops=") end
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
local shape = MODELS[S.model] or error('model must be 124M, 350M or tiny, not ' .. tostring(S.model))
local cfg = {vocab = shape.vocab, context = S.T, layers = shape.layers, heads = shape.heads, d = shape.d, dropout = 0}
local stage = {zero = S.zero, checkpoint = S.checkpoint, precision = S.precision}
local m = gpt.GPT(cfg, {seed = 1, embed = {zero = S.zero, precision = S.precision}, blocks = stage,
                        head = {zero = S.zero, precision = S.precision}})
local opt = ds.optim.AdamW {m, lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1}
local x, y = ds.tensor('int32', S.B, S.T), ds.tensor('int32', S.B, S.T)
math.randomseed(7)
for i = 1, S.B * S.T do x:set(i, math.random(0, cfg.vocab - 1)); y:set(i, math.random(0, cfg.vocab - 1)) end

ds.memory_reset_peaks()
local times = {}
for step = 1, S.warmup + S.steps do
  local t0 = ds.now()
  local st = m:train_step {step = step, accum = 1, optimizer = opt, clip = 1.0, lr = 3e-4,
                           next_batch = function() return x, y end}
  assert(st.loss == st.loss, 'the loss is NaN')
  if step > S.warmup then times[#times + 1] = ds.now() - t0 end
end
table.sort(times)
local dt = times[(#times + 1) // 2]
local n = m:num_parameters()
local flops_per_token = 6 * n + 6 * cfg.layers * cfg.d * S.T
local tps = S.B * S.T / dt
local mem = ds.memory()
local parts = {}
for _, cat in ipairs {'params', 'grads', 'optimizer', 'activations', 'workspace', 'comm', 'data', 'total'} do
  if mem[cat] then parts[#parts + 1] = string.format('"%s":%d', cat, mem[cat].peak) end
end
print(string.format('{"bench":"gpt_gpu","device":"%s","model":"gpt2-%s","params":%d,"B":%d,"T":%d,'
  .. '"precision":"%s","zero":%d,"checkpoint":"%s","step_ms":%.2f,"tokens_per_s":%.0f,"tflops":%.1f,'
  .. '"mfu":%.4f,"peak_tflops":%g,"mem_peak_bytes":{%s},"reserved_unused_bytes":%d}', mem.device,
  S.model, n, S.B, S.T, S.precision, S.zero, S.checkpoint, dt * 1e3, tps, tps * flops_per_token / 1e12,
  tps * flops_per_token / (S.peak_tflops * 1e12), S.peak_tflops, table.concat(parts, ','),
  mem.reserved_unused or 0))
