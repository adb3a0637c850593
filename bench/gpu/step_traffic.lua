-- What a GPT-2 training step asks of a GPU, counted on any device (docs/gpu.md, "What a
-- step asks of the GPU"):
--   dsrun run bench/gpu/step_traffic.lua [model=124M|350M|tiny] [T=1024] [checkpoint=none|full]
--       [Bs=1,2] [target_B=8] [precision=bf16]
-- Builds the model as bench_gpt.lua does (ZeRO 0, world 1, dropout 0) and runs two steps
-- at each micro-batch of Bs with every kernel-table entry and memory op counted
-- (ds.kernel_counts: FLOPs and the least bytes each call must move). Step 2 is the one
-- reported; step 1 must equal it but for allocations made once (their zeroing). Every
-- count is a + b*B (B only lengthens the rows of the same calls), so two batches give a
-- and b exactly and target_B is extrapolated from them; a third batch in Bs is checked
-- against that line. Then a roofline per call, time = max(FLOPs / peak, bytes / HBM
-- bandwidth), summed per entry, per category and over the step, on two GPUs' published
-- spec figures (below): a lower bound of the step time, hence an upper bound of MFU. It
-- is what the engine as built asks, not a measurement. Prints one JSON line per GPU and
-- a table.
local ds = require 'ds'
local gpt = require 'ds.gpt'

local MODELS = {
  ['124M'] = {vocab = 50257, layers = 12, heads = 12, d = 768},
  ['350M'] = {vocab = 50257, layers = 24, heads = 16, d = 1024},
  tiny = {vocab = 64, layers = 2, heads = 4, d = 64}, -- checks this script quickly
}
-- Published spec figures (dense, no sparsity): NVIDIA H100 SXM5 and H200 SXM datasheets.
-- fp32 is the CUDA cores' rate (no tensor cores, no TF32); PCIe Gen5 x16 per direction.
local GPUS = {
  {name = 'H100 SXM', tc16 = 989e12, fp32 = 67e12, hbm = 3.35e12, pcie = 64e9},
  {name = 'H200 SXM', tc16 = 989e12, fp32 = 67e12, hbm = 4.8e12, pcie = 64e9},
}

local S = {model = '124M', T = 1024, checkpoint = 'none', Bs = '1,2', target_B = 8, precision = 'bf16'}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  if not k or S[k] == nil then error("argument '" .. a .. "': expected model=, T=, checkpoint=, Bs=, target_B=, precision=") end
  S[k] = math.tointeger(tonumber(v)) or v
end
local shape = MODELS[S.model] or error('model must be 124M, 350M or tiny, not ' .. tostring(S.model))
local Bs = {}
for b in tostring(S.Bs):gmatch('[^,]+') do Bs[#Bs + 1] = math.tointeger(tonumber(b)) or error('Bs: ' .. S.Bs) end
assert(#Bs >= 2 and Bs[1] ~= Bs[2], 'Bs must name at least two different micro-batches')

-- Which peak an entry's FLOPs run at, and its category.
local function category(name)
  if name:match('^matmul') then return 'gemm' end
  if name:match('^attention') then return 'attention' end
  if name:match('^layernorm') then return 'norm' end
  if name:match('^crossentropy') then return 'loss' end
  if name:match('^embedding') or name:match('^posemb') then return 'embedding' end
  if name:match('^adamw') or name:match('^sgd') or name:match('sumsq$') then return 'optimizer' end
  if name:match('^half_') then return '16-bit convert' end
  if name == 'memset0' or name == 'alloc_zero' or name == 'alloc_uninit' then return 'memset' end
  if name == 'copy' or name == 'to_host' or name == 'from_host' then return 'copies' end
  return 'elementwise'
end
local CATS = {'gemm', 'attention', 'elementwise', 'norm', 'embedding', 'loss', 'optimizer',
              '16-bit convert', 'memset', 'copies'}

-- The seconds one bucket of calls (same cost each) takes at best on gpu.
local function roofline(name, c, gpu)
  local bytes = c.bytes_read + c.bytes_written
  if name == 'to_host' or name == 'from_host' then return bytes / gpu.pcie end
  local tensor = S.precision ~= 'fp32' and (name:match('^matmul16') or name:match('^attention16'))
  return math.max(c.flops / (tensor and gpu.tc16 or gpu.fp32), bytes / gpu.hbm)
end

-- Two counted steps at micro-batch B: the counts of each, the seconds each took here.
local function run(B)
  local cfg = {vocab = shape.vocab, context = S.T, layers = shape.layers, heads = shape.heads, d = shape.d, dropout = 0}
  local stage = {zero = 0, checkpoint = S.checkpoint, precision = S.precision}
  local m = gpt.GPT(cfg, {seed = 1, embed = {zero = 0, precision = S.precision}, blocks = stage,
                          head = {zero = 0, precision = S.precision}})
  local opt = ds.optim.AdamW {m, lr = 3e-4, betas = {0.9, 0.95}, weight_decay = 0.1}
  local x, y = ds.tensor('int32', B, S.T), ds.tensor('int32', B, S.T)
  math.randomseed(7)
  for i = 1, B * S.T do x:set(i, math.random(0, cfg.vocab - 1)); y:set(i, math.random(0, cfg.vocab - 1)) end
  local counts, secs = {}, {}
  for step = 1, 2 do
    local t0 = ds.now()
    ds.kernel_counts(true)
    local st = m:train_step {step = step, accum = 1, optimizer = opt, clip = 1.0, lr = 3e-4,
                             next_batch = function() return x, y end}
    counts[step] = ds.kernel_counts()
    ds.kernel_counts(false)
    secs[step] = ds.now() - t0
    assert(st.loss == st.loss, 'the loss is NaN')
  end
  local n = m:num_parameters()
  m, opt = nil, nil
  collectgarbage()
  collectgarbage()
  return counts, secs, n
end

local FIELDS = {'calls', 'flops', 'bytes_read', 'bytes_written'}

local function same(a, b)
  for _, f in ipairs(FIELDS) do if a[f] ~= b[f] then return false end end
  return true
end

-- Entries whose step 1 differs from step 2: what happens once (allocations).
local function step1_only(c1, c2)
  local d = {}
  for name, a in pairs(c1) do
    local b = c2[name] or {calls = 0, flops = 0, bytes_read = 0, bytes_written = 0}
    if not same(a, b) then
      d[#d + 1] = string.format('%s %+d calls %+.3f GB', name, a.calls - b.calls,
                                (a.bytes_read + a.bytes_written - b.bytes_read - b.bytes_written) / 1e9)
    end
  end
  for name in pairs(c2) do if not c1[name] then d[#d + 1] = name .. ' only on step 2' end end
  table.sort(d)
  return d
end

-- The line through (B1, c1) and (B2, c2) at B, for every field of a count.
local function line(c1, c2, B1, B2, B)
  local out = {}
  for _, f in ipairs(FIELDS) do
    local slope = (c2[f] - c1[f]) // (B2 - B1)
    assert(slope * (B2 - B1) == c2[f] - c1[f], 'a count not linear in B: ' .. f)
    out[f] = c1[f] + slope * (B - B1)
  end
  return out
end

-- Every entry's count (and its buckets of calls, matched in order) at B from two runs.
-- Buckets that do not match one for one (an op whose sizes merge or split with B) fall
-- back to the entry's total as one bucket: max(sum F / peak, sum bytes / BW) is still a
-- lower bound of the sum of the per-call maxima.
local function extrapolate(r1, r2, B1, B2, B)
  local out = {}
  local names = {}
  for name in pairs(r1) do names[name] = true end
  for name in pairs(r2) do names[name] = true end
  local zero = {calls = 0, flops = 0, bytes_read = 0, bytes_written = 0, costs = {}}
  for name in pairs(names) do
    local a, b = r1[name] or zero, r2[name] or zero
    local e = line(a, b, B1, B2, B)
    e.costs, e.costs_matched = {}, #a.costs == #b.costs
    for k = 1, #a.costs do
      if not e.costs_matched or a.costs[k].calls ~= b.costs[k].calls then e.costs_matched = false; break end
      e.costs[k] = line(a.costs[k], b.costs[k], B1, B2, B)
    end
    if not e.costs_matched then e.costs = {line(a, b, B1, B2, B)} end
    out[name] = e
  end
  return out
end

local runs, secs, nparams = {}, {}, nil
for i, B in ipairs(Bs) do
  local c, s, n = run(B)
  runs[i], secs[i], nparams = c[2], s, n
  local once = step1_only(c[1], c[2])
  io.stderr:write(string.format('B=%d: step 1 %.1f s, step 2 %.1f s here (%s); step 1 beyond step 2: %s\n',
    B, s[1], s[2], ds.memory().device, #once > 0 and table.concat(once, '; ') or 'nothing'))
end

-- a third batch lies on the line of the first two
for i = 3, #Bs do
  local pred = extrapolate(runs[1], runs[2], Bs[1], Bs[2], Bs[i])
  for name, p in pairs(pred) do
    local got = runs[i][name] or {calls = 0, flops = 0, bytes_read = 0, bytes_written = 0}
    if not same(p, got) then error(string.format('B=%d: %s is not on the line of B=%d and B=%d', Bs[i], name, Bs[1], Bs[2])) end
  end
  io.stderr:write(string.format('B=%d: every count on the line of B=%d and B=%d\n', Bs[i], Bs[1], Bs[2]))
end

local B = S.target_B
local counts = extrapolate(runs[1], runs[2], Bs[1], Bs[2], B)
local names = {}
for name in pairs(counts) do names[#names + 1] = name end
local tokens = B * S.T
local model_flops = (6 * nparams + 6 * shape.layers * shape.d * S.T) * tokens

-- per GPU: every entry's and category's seconds, the step's
local result = {}
for g, gpu in ipairs(GPUS) do
  local r = {entry = {}, cat = {}, total = 0}
  for _, name in ipairs(names) do
    local t = 0
    for _, c in ipairs(counts[name].costs) do t = t + roofline(name, c, gpu) end
    r.entry[name] = t
    local cat = category(name)
    r.cat[cat] = (r.cat[cat] or 0) + t
    r.total = r.total + t
  end
  r.mfu = model_flops / (r.total * GPUS[1].tc16)
  result[g] = r
end
table.sort(names, function(a, b) return result[1].entry[a] > result[1].entry[b] end)

local label = string.format('gpt2-%s %s T=%d checkpoint=%s B=%d (extrapolated from B=%s)',
  S.model, S.precision, S.T, S.checkpoint, B, S.Bs)
for g, gpu in ipairs(GPUS) do
  local r = result[g]
  local e, c = {}, {}
  for _, name in ipairs(names) do
    local n = counts[name]
    e[#e + 1] = string.format('"%s":{"calls":%d,"gflop":%.3f,"gb_read":%.4f,"gb_written":%.4f,"ms":%.4f}',
      name, n.calls, n.flops / 1e9, n.bytes_read / 1e9, n.bytes_written / 1e9, r.entry[name] * 1e3)
  end
  for _, cat in ipairs(CATS) do
    if r.cat[cat] then c[#c + 1] = string.format('"%s":%.4f', cat, r.cat[cat] * 1e3) end
  end
  print(string.format('{"bench":"step_traffic","gpu":"%s","model":"gpt2-%s","params":%d,"precision":"%s",'
    .. '"T":%d,"B":%d,"extrapolated_from":[%s],"checkpoint":"%s","zero":0,"model_tflop":%.3f,'
    .. '"step_ms_lower_bound":%.3f,"mfu_ceiling":%.4f,"categories_ms":{%s},"entries":{%s}}',
    gpu.name, S.model, nparams, S.precision, S.T, B, S.Bs, S.checkpoint, model_flops / 1e12,
    r.total * 1e3, r.mfu, table.concat(c, ','), table.concat(e, ',')))
end

-- the table
local out = {}
local function add(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
add('%s', label)
add('%-30s %6s %10s %9s %9s %9s  %s', 'entry', 'calls', 'GFLOP', 'GB', 'H100 ms', 'H200 ms', 'category')
local sum_f, sum_b = 0, 0
for _, name in ipairs(names) do
  local n = counts[name]
  local gb = (n.bytes_read + n.bytes_written) / 1e9
  sum_f, sum_b = sum_f + n.flops, sum_b + gb
  add('%-30s %6d %10.1f %9.3f %9.3f %9.3f  %s', name, n.calls, n.flops / 1e9, gb,
      result[1].entry[name] * 1e3, result[2].entry[name] * 1e3, category(name))
end
add('%-30s %6s %10.1f %9.3f %9.3f %9.3f', 'step (lower bound)', '', sum_f / 1e9, sum_b,
    result[1].total * 1e3, result[2].total * 1e3)
for _, cat in ipairs(CATS) do
  if result[1].cat[cat] then
    add('  %-28s %6s %10s %9s %9.3f %9.3f  %4.1f%%', cat, '', '', '', result[1].cat[cat] * 1e3,
        result[2].cat[cat] * 1e3, 100 * result[1].cat[cat] / result[1].total)
  end
end
add('model FLOPs (6N + 6LCT) x %d tokens = %.2f TFLOP; MFU ceiling at 989 TFLOP/s: H100 SXM %.1f%%, H200 SXM %.1f%%',
    tokens, model_flops / 1e12, 100 * result[1].mfu, 100 * result[2].mfu)
print(table.concat(out, '\n'))
