-- One rank of the ZeRO exactness runs: a tiny GPT trained on synthetic progressions with
-- the global batch split into contiguous per-rank rows, so the maths is the same at any
-- world size. Writes, on rank 0, every step's loss and global grad norm and the final
-- parameters to out= (one "kind index value" line each); zero_exact.c compares files.
--   dsrun run zero_gpt.lua out=PATH [zero=N] [embed=N] [blocks=N] [head=N] [accum=A]
--                          [steps=S] [bucket=E] [clip=C] [optim=sgd|adamw] [lr=X]
--                          [dropout=P] [save=DIR save_at=N] [load=DIR]
--                          [precision=fp32|bf16|fp16] [embed_precision=..] [blocks_precision=..]
--                          [head_precision=..] [init_scale=X]
-- init_scale: the fp16 loss scaler's first scale (default 65536); a large one makes the
-- first steps overflow and be skipped. With a loss scaler, every rank checks at the end
-- that all ranks skipped exactly the same steps.
-- dropout: the GPT's dropout (default 0); masks are keyed by global batch row, so any
-- world size draws the single-rank run's masks.
-- save: writes a state checkpoint after step N; load: starts from DIR's latest and
-- continues to `steps`.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local synth = require 'ds.synth'

local S = {zero = 0, accum = 1, steps = 20, bucket = 0, clip = 0.5, batch = 8, lr = 1e-3}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  if not k then error('argument ' .. a .. ': expected key=value') end
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
assert(S.out, 'out= is required')
ds.set_threads(1)

local rank, world = ds.rank(), ds.world_size()
local cfg = gpt.config {vocab = 64, context = 16, layers = 2, heads = 4, d = 32, dropout = S.dropout or 0}
local prec = S.precision or 'fp32'
local staging = {seed = 7, embed = {zero = S.embed or S.zero, precision = S.embed_precision or prec},
                 blocks = {zero = S.blocks or S.zero, precision = S.blocks_precision or prec},
                 head = {zero = S.head or S.zero, precision = S.head_precision or prec},
                 zero_bucket = S.bucket > 0 and S.bucket or nil,
                 loss_scaler = S.init_scale and {init_scale = S.init_scale} or nil}
local model = gpt.GPT(cfg, staging)
local opt = S.optim == 'sgd' and ds.optim.SGD {model, lr = S.lr, momentum = 0.9, weight_decay = 0.1}
  or ds.optim.AdamW {model, lr = S.lr, betas = {0.9, 0.95}, weight_decay = 0.1}
assert(S.batch % world == 0, 'batch must split evenly over the ranks')
-- This rank's rows [rank * b, (rank + 1) * b) of the global batch of S.batch rows.
local source = synth.progressions {vocab = cfg.vocab, context = cfg.context, batch = S.batch // world, seed = 11}

local t0 = ds.now()
local out = rank == 0 and assert(io.open(S.out, 'w'))
local first = 1
local skipped = {}
if S.load then first = model:load(S.load, opt).step + 1 end
for step = first, S.steps do
  local st = model:train_step {step = step, accum = S.accum, optimizer = opt, clip = S.clip,
    next_batch = function(micro) return source:batch(step, micro) end}
  if out then out:write(string.format('loss %d %.9e\ngnorm %d %.9e\n', step, st.loss, step, st.grad_norm)) end
  skipped[step] = st.skipped
  if out and model.scaler then out:write(string.format('scale %d %.9e\nskipped %d %d\n', step, st.loss_scale, step, st.skipped and 1 or 0)) end
  if S.save and step == S.save_at then model:save(S.save, opt, {step = step}) end
end
-- An overflow anywhere skips the step everywhere: the sum over ranks of each step's
-- skip flag is 0 or the world size.
if model.scaler then
  local flags = ds.tensor('fp32', S.steps)
  for step = first, S.steps do flags:set(step, skipped[step] and 1 or 0) end
  ds.comm.all_reduce(flags)
  for step = first, S.steps do
    local n = flags:get(step)
    if n ~= 0 and n ~= world then error(string.format('step %d: skipped on %d of %d ranks', step, n, world)) end
  end
end
-- Final parameters (ZeRO-3 keeps shards only: with_params gathers them).
model:with_params(function()
  local i = 0
  for _, s in ipairs(model.stages) do
    for _, v in ipairs(s:params():to_table()) do
      i = i + 1
      if out then out:write(string.format('param %d %.9e\n', i, v)) end
    end
  end
end)
if out then out:close() end
local m = ds.memory()
io.stderr:write(string.format('rank %d: %d steps in %.3f s\n', rank, S.steps, ds.now() - t0))
print(string.format('rank %d: params %d grads %d optimizer %d bytes', rank, m.params.current,
                    m.grads.current, m.optimizer.current))
