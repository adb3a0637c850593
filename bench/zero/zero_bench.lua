-- One rank of the ZeRO benchmark (bench/zero/zero_bench.c starts N of them): a GPT with
-- every stage at ZeRO stage `zero` and precision `precision` (fp32, bf16 or fp16: 16-bit
-- working copy and gradients, fp32 masters and moments; fp16 with the model's dynamic
-- loss scaler, whose first steps may skip), AdamW, trained `warmup` + `steps` steps on
-- synthetic data (global batch split over the ranks). Rank 0 appends one JSON line to
-- out= with the model-state bytes from the allocation counters (after the last step:
-- outside any ZeRO-3 gather window) and the fastest step time.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local synth = require 'ds.synth'

local S = {zero = 0, precision = 'fp32', steps = 8, warmup = 2, batch = 8, vocab = 512,
           context = 64, layers = 4, d = 128, heads = 4, bucket = 0, threads = 1, prefetch = 1}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
ds.set_threads(S.threads)
local rank, world = ds.rank(), ds.world_size()
local cfg = gpt.config {vocab = S.vocab, context = S.context, layers = S.layers, heads = S.heads, d = S.d}
local function stage() return {zero = S.zero, precision = S.precision} end
local staging = {seed = 1, embed = stage(), blocks = stage(), head = stage(),
                 zero_bucket = S.bucket > 0 and S.bucket or nil, zero_prefetch = S.prefetch ~= 0}
local model = gpt.GPT(cfg, staging)
local opt = ds.optim.AdamW {model, lr = 1e-4}
-- This rank's rows of the global batch of S.batch rows.
local source = synth.progressions {vocab = cfg.vocab, context = cfg.context, batch = S.batch // world, seed = 3}

-- fp16 steps the loss scaler skipped for overflow (the masters need one that was not)
local skipped = 0
local function step(n)
  local r = model:train_step {step = n, optimizer = opt, clip = 1.0,
    next_batch = function() return source:batch(n, 1) end}
  if r.skipped then skipped = skipped + 1 end
  return r
end
for n = 1, S.warmup do step(n) end
ds.memory_reset_peaks()
-- The fastest step: on a shared machine a mean carries other programs' bursts; the
-- driver also repeats each configuration, interleaved, and keeps the fastest run.
local times, loss = {}, nil
for n = S.warmup + 1, S.warmup + S.steps do
  local t0 = ds.now()
  loss = step(n).loss
  times[#times + 1] = ds.now() - t0
end
table.sort(times)
local dt = times[1]
local m = ds.memory()

-- Padding: parameters start on 16-float boundaries in a stage's flat buffer (numel) and
-- ZeRO pads numel to a multiple of the world (padded).
local psi, numel, padded = model:num_parameters(), 0, 0
for _, st in ipairs((model.zero or model:zero_state()):info().stages) do numel = numel + st.numel; padded = padded + st.padded end
if rank == 0 then
  local f = assert(io.open(S.out, 'a'))
  f:write(string.format('{"zero":%d,"world":%d,"precision":"%s","params":%d,"flat_elems":%d,'
    .. '"padded_elems":%d,"params_bytes":%d,"grads_bytes":%d,"optimizer_bytes":%d,'
    .. '"params_peak_bytes":%d,"grads_peak_bytes":%d,"comm_peak_bytes":%d,"step_s":%.6f,'
    .. '"loss":%.6f,"skipped":%d}\n', S.zero, world, S.precision, psi, numel, padded,
    m.params.current, m.grads.current, m.optimizer.current, m.params.peak, m.grads.peak,
    m.comm.peak, dt, loss, skipped))
  f:close()
end
