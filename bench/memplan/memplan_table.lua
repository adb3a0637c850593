-- The planner's table for docs/memory.md: per-GPU peak bytes of GPT-2 124M, 350M, 774M,
-- 1.5B and a 7B-shaped GPT at N = 8 ranks, T = 1024, micro-batch 8, AdamW, under each
-- technique alone and combined, and which device sizes each fits (24/40/80/141 GB).
-- Shapes only: nothing is allocated.
--   dsrun run bench/memplan/memplan_table.lua [world=8] [batch=8] [context=1024] [json=1]
local ds = require 'ds'
local gpt = require 'ds.gpt'
local memplan = require 'ds.memplan'

-- split=1: every block a stage of its own (ZeRO-2/3 then hold one block's full gradients
-- or parameters at a time, not the whole model's: docs/memory.md); split=0: one stage.
local S = {world = 8, batch = 8, context = 1024, json = 0, split = 1}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
local MODELS = {
  {'GPT-2 124M', {layers = 12, d = 768, heads = 12}},
  {'GPT-2 350M', {layers = 24, d = 1024, heads = 16}},
  {'GPT-2 774M', {layers = 36, d = 1280, heads = 20}},
  {'GPT-2 1.5B', {layers = 48, d = 1600, heads = 25}},
  {'7B-shaped', {layers = 32, d = 4096, heads = 32}},
}
local CHOICES = {
  {'baseline (ZeRO 0, fp32)', 0, 'none', 'fp32'},
  {'bf16', 0, 'none', 'bf16'},
  {'checkpoint full', 0, 'full', 'fp32'},
  {'ZeRO-1', 1, 'none', 'fp32'},
  {'ZeRO-2', 2, 'none', 'fp32'},
  {'ZeRO-3', 3, 'none', 'fp32'},
  {'ZeRO-3 + bf16', 3, 'none', 'bf16'},
  {'ZeRO-2 + ckpt + bf16', 2, 'full', 'bf16'},
  {'ZeRO-3 + ckpt + bf16', 3, 'full', 'bf16'},
}
local DEVICES = {24, 40, 80, 141}
local G = 1e9

local job = {world = S.world, batch = {S.batch, S.context}, targets = S.batch * S.context,
             host_device = false, gloo = false, gemm16_half = true,
             attention16_half = true}
print(string.format('per-GPU predicted peak (GB = 1e9 bytes), N = %d, T = %d, micro-batch %d, AdamW, %s; ' ..
                    'fits: the devices (GB) it fits', S.world, S.context, S.batch,
                    S.split ~= 0 and 'a stage per block' or 'all blocks in one stage'))
print(string.format('%-12s %-24s %9s %9s %9s %9s %9s %9s  %s', 'model', 'choice', 'params', 'grads',
                    'optim', 'activ', 'other', 'peak', 'fits'))
for _, m in ipairs(MODELS) do
  local spec = {vocab = 50257, context = S.context, layers = m[2].layers, heads = m[2].heads, d = m[2].d}
  local blocks = {}
  if S.split ~= 0 then for i = 1, spec.layers do blocks[i] = {layers = 1} end end
  local model = memplan.describe(function() return gpt.GPT(gpt.config(spec), {seed = 1, blocks = blocks}) end)
  local nparams = 0
  for _, q in ipairs(model:parameters()) do nparams = nparams + q.info.numel end
  for _, c in ipairs(CHOICES) do
    local ch = {}
    for k in ipairs(model.stages) do ch[k] = {zero = c[2], checkpoint = c[3], precision = c[4]} end
    local p = memplan.predict(model, job, ch)
    local at = p.categories
    local other = at.workspace.at_peak + at.comm.at_peak + at.data.at_peak
    local fits = {}
    for _, d in ipairs(DEVICES) do if p.total_peak <= d * G then fits[#fits + 1] = d end end
    print(string.format('%-12s %-24s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f  %s', m[1], c[1],
      at.params.at_peak / G, at.grads.at_peak / G, at.optimizer.at_peak / G, at.activations.at_peak / G,
      other / G, p.total_peak / G, #fits > 0 and table.concat(fits, ',') or 'none'))
    if S.json ~= 0 then
      print(string.format('{"model":"%s","params":%d,"choice":"%s","world":%d,"context":%d,"batch":%d,' ..
        '"peak_bytes":%d,"params_bytes":%d,"grads_bytes":%d,"optimizer_bytes":%d,"activations_bytes":%d,' ..
        '"recompute_flops":%.4g,"flops":%.4g,"comm_bytes":%.4g}', m[1], nparams, c[1], S.world, S.context,
        S.batch, p.total_peak, at.params.at_peak, at.grads.at_peak, at.optimizer.at_peak,
        at.activations.at_peak, p.recompute_flops, p.flops, p.comm_bytes))
    end
  end
end
