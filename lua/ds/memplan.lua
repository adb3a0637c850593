-- The memory planner (docs/memory.md): each rank's predicted peak bytes per category for
-- a model's stages under a choice of ZeRO stage, checkpointing and precision per stage,
-- what each choice costs, every choice that matters, and the fastest that fits.
--
--   local memplan = require 'ds.memplan'
--   local p = memplan.predict(model, {batch = {8, 64}, targets = 8 * 64})
--   print(memplan.report(p))
--
-- Under `dsrun plan-memory` (DS_PLAN_MEMORY set) the ds library runs in a shapes-only
-- mode: ds.Stage describes a stage without allocating it, ds.Model returns a plan (this
-- file's Plan) whose first train_step (or forward) takes the batch's shapes, prints the
-- plan and ends the script.
local util = require 'ds.util'
local core = require 'ds._core'

local M = {}

local AUTO_FIELDS = {'zero', 'checkpoint', 'precision'} -- what 'auto' may leave to the planner

local CATS = {'params', 'grads', 'optimizer', 'activations', 'workspace', 'comm', 'data'}
M.CATEGORIES = CATS

local function stages_of(m)
  if type(m) == 'table' and m.stages then return m.stages end
  return m
end

-- A stage's choice as the stage was built ({zero=, checkpoint=, precision=}).
function M.choice_of(stage)
  local i = stage:info()
  return {zero = i.zero, checkpoint = i.checkpoint, precision = i.precision}
end

-- The run around the model, from what the rank knows: its world, its device (a cpu rank
-- computes on host memory, collectives over Gloo), the job's grad_accum.
function M.job_defaults(t)
  local job = {}
  for k, v in pairs(t or {}) do job[k] = v end
  local dev = os.getenv('DS_PLAN_DEVICE') or core.memory().device
  if job.world == nil then job.world = core.world_size() end
  if job.host_device == nil then job.host_device = dev == 'cpu' end
  if job.gloo == nil then job.gloo = not dev:match('^cuda') end
  if job.gemm16_half == nil then job.gemm16_half = dev:match('^cuda') ~= nil end
  if job.attention16_half == nil then job.attention16_half = dev:match('^cuda') ~= nil end
  if job.accum == nil then job.accum = 1 end
  return job
end

-- The job's sizes from a micro-batch (x, y tensors) and the train_step table.
function M.job_from_batch(x, y, t)
  local shape = x:shape()
  return {batch = shape, batch_dtype = x:dtype() == 'fp32' and 'fp32' or 'int32',
          targets = y:numel(), accum = t and t.accum or 1,
          optim = t and t.optimizer and t.optimizer.momentum ~= nil and 'sgd' or 'adamw'}
end

-- One prediction. model: a ds.Model, a Plan or a list of stages; choices: one per stage
-- (default: each stage's own); job: {batch=, targets=, accum=, world=, optim=, bucket=,
-- prefetch=, gemm_flops=, link_bytes_s=}.
function M.predict(model, job, choices, steps)
  local stages = stages_of(model)
  if not choices then
    choices = {}
    for k, s in ipairs(stages) do choices[k] = M.choice_of(s) end
  end
  local j = M.job_defaults(job)
  if j.bucket == nil and type(model) == 'table' then j.bucket = model.zero_bucket end
  local p = core.memplan_predict(stages, choices, j, steps)
  p.choices, p.job = choices, j
  return p
end

local hb = util.human_bytes

-- The prediction as text: lines by category with their formulas, the peak and its place.
function M.report(p, opts)
  opts = opts or {}
  local out = {}
  local function add(...) out[#out + 1] = string.format(...) end
  local ch = {}
  for k, c in ipairs(p.choices or {}) do
    ch[k] = string.format('zero %s, checkpoint %s, %s', tostring(c.zero), tostring(c.checkpoint), tostring(c.precision))
  end
  local same = true
  for k = 2, #ch do same = same and ch[k] == ch[1] end
  if #ch > 0 then add('choice%s: %s', same and ' (every stage)' or ' per stage', same and ch[1] or table.concat(ch, ' | ')) end
  add('%-32s %-12s %12s %12s  %s', 'line', 'category', 'at peak', 'own peak', 'formula')
  for _, l in ipairs(p.lines) do
    if l.peak > 0 or opts.all_lines then
      add('%-32s %-12s %12s %12s  %s', l.name, l.category, hb(l.at_peak), hb(l.peak), l.formula)
    end
  end
  add('%-32s %-12s %12s', 'total (peak)', '', hb(p.total_peak))
  add('the peak: %s', p.peak_at)
  add('per step: %.3g GFLOP forward+backward, %.3g GFLOP recomputed, %s communicated%s',
      p.flops / 1e9, p.recompute_flops / 1e9, hb(math.floor(p.comm_bytes)),
      p.step_s > 0 and string.format(', about %.1f ms', p.step_s * 1e3) or '')
  return table.concat(out, '\n')
end


-- ---- every combination, the choice -----------------------------------------------------

local CKPT_NAMES = {[0] = 'none', [1] = 'full'}
local function ckpt_name(n) return CKPT_NAMES[n] or ('every:' .. n) end

-- The candidate choices, the same on every stage: ZeRO 0-3 (only 0 at world 1: the
-- others shard nothing there), checkpointing none/full/every:2, fp32/bf16 (fp16 only
-- with allow_fp16: it changes numerics).
function M.candidates(world, allow_fp16)
  local out = {}
  local precs = {'fp32', 'bf16'}
  if allow_fp16 then precs[3] = 'fp16' end
  for z = 0, world > 1 and 3 or 0 do
    for _, c in ipairs {'none', 'full', 'every:2'} do
      for _, p in ipairs(precs) do out[#out + 1] = {zero = z, checkpoint = c, precision = p} end
    end
  end
  return out
end

local function uniform(stages, c)
  local t = {}
  for k in ipairs(stages) do t[k] = {zero = c.zero, checkpoint = c.checkpoint, precision = c.precision} end
  return t
end

-- Every candidate's prediction, fastest first (by predicted step time, then peak), each
-- with fits = (limit == 0 or peak <= limit) and dominated = a faster one needs no more
-- memory. Returns the list and the recommendation: the fastest that fits, or nil.
function M.all(model, job, opts)
  opts = opts or {}
  local stages = stages_of(model)
  local j = M.job_defaults(job)
  local rows = {}
  for _, c in ipairs(M.candidates(j.world, opts.allow_fp16)) do
    local p = M.predict(model, j, uniform(stages, c))
    p.choice = c
    p.fits = (opts.limit or 0) == 0 or p.total_peak <= opts.limit
    rows[#rows + 1] = p
  end
  local function cost(p) return p.step_s > 0 and p.step_s or (p.flops + p.recompute_flops) end
  table.sort(rows, function(a, b)
    if cost(a) ~= cost(b) then return cost(a) < cost(b) end
    return a.total_peak < b.total_peak
  end)
  local best_peak = math.huge
  for _, p in ipairs(rows) do
    p.dominated = p.total_peak >= best_peak
    if p.total_peak < best_peak then best_peak = p.total_peak end
  end
  local rec
  for _, p in ipairs(rows) do if p.fits then rec = p; break end end
  return rows, rec
end

function M.choice_text(c)
  return string.format('zero %d, checkpoint %s, %s', c.zero,
    type(c.checkpoint) == 'number' and ckpt_name(c.checkpoint) or tostring(c.checkpoint), c.precision)
end

-- Per-stage choices as text: one when every stage has the same.
function M.choices_text(model, choices)
  local t, same = {}, true
  for k, c in ipairs(choices) do
    t[k] = M.choice_text(c)
    same = same and t[k] == t[1]
  end
  if same then return t[1] .. ' (every stage)' end
  local stages = stages_of(model)
  for k in ipairs(t) do t[k] = stages[k]:info().name .. ': ' .. t[k] end
  return table.concat(t, '; ')
end

-- The table of every combination (dominated ones folded into a count).
function M.all_report(rows, rec, opts)
  opts = opts or {}
  local out = {}
  local function add(...) out[#out + 1] = string.format(...) end
  local base = rows[1] and (rows[1].step_s > 0 and rows[1].step_s or nil)
  add('%-36s %12s %12s %12s %12s %10s  %s', 'choice (every stage)', 'peak', 'recompute', 'comm/step',
      'step', 'vs fastest', 'fits')
  local folded = 0
  for _, p in ipairs(rows) do
    if p.dominated and not opts.all_rows then
      folded = folded + 1
    else
      add('%-36s %12s %9.3g GF %12s %9.1f ms %9.2fx  %s%s', M.choice_text(p.choice), hb(p.total_peak),
          p.recompute_flops / 1e9, hb(math.floor(p.comm_bytes)), p.step_s * 1e3,
          base and p.step_s / base or 0, p.fits and 'yes' or 'no', p == rec and '  <- recommended' or '')
    end
  end
  if folded > 0 then add('(%d more need at least as much memory as a faster one: folded)', folded) end
  return table.concat(out, '\n')
end

-- Why nothing fits, and the knob after ours: the smallest peak, and what more ranks or
-- a smaller micro-batch would give.
function M.does_not_fit(model, job, rows, limit)
  local least = rows[1]
  for _, p in ipairs(rows) do if p.total_peak < least.total_peak then least = p end end
  local out = {string.format('does not fit: the smallest peak is %s (%s) against a limit of %s',
                             hb(least.total_peak), M.choice_text(least.choice), hb(limit))}
  local j = M.job_defaults(job)
  local more = {}
  for k, v in pairs(j) do more[k] = v end
  more.world = j.world * 2
  local p2
  for _, q in ipairs((M.all(model, more))) do if not p2 or q.total_peak < p2.total_peak then p2 = q end end
  out[#out + 1] = string.format('  more ranks: at world %d, %s needs %s%s', more.world, M.choice_text(p2.choice),
                                hb(p2.total_peak), p2.total_peak <= limit and ' (fits)' or '')
  if j.batch[1] > 1 then
    local half = {}
    for k, v in pairs(j) do half[k] = v end
    half.batch = {}
    for i, d in ipairs(j.batch) do half.batch[i] = d end
    half.batch[1] = j.batch[1] // 2
    half.targets = j.targets * half.batch[1] // j.batch[1]
    half.accum = j.accum * 2
    local p3 = M.predict(model, half, least.choices)
    out[#out + 1] = string.format('  smaller micro-batch: %d rows (grad_accum %d) needs %s%s', half.batch[1],
                                  half.accum, hb(p3.total_peak), p3.total_peak <= limit and ' (fits)' or '')
  end
  return table.concat(out, '\n')
end

-- ---- the node's speeds ---------------------------------------------------------------

local function hostname()
  local f = io.open('/etc/hostname', 'r')
  local h = f and f:read('l') or os.getenv('HOSTNAME') or 'host'
  if f then f:close() end
  return (h:gsub('[^%w%.%-]', '_'))
end

local function cache_path()
  local dir = os.getenv('DS_PLAN_CACHE') or ((os.getenv('XDG_CACHE_HOME') or
              ((os.getenv('HOME') or '/tmp') .. '/.cache')) .. '/dslaunch')
  return dir, dir .. '/speed-' .. hostname() .. '-' .. core.memory().device:gsub('[^%w]', '_') .. '.lua'
end

-- GEMM FLOP/s of this rank's device (a Linear layer's forward, 512 x 1024 x 1024) and the
-- bytes/s a collective moves per rank (on one node's loopback: the device's copy speed;
-- DS_PLAN_LINK_GBPS sets it for a real network). Measured once per node and device,
-- cached in ~/.cache/dslaunch/speed-HOST-DEVICE.lua.
function M.machine()
  local dir, path = cache_path()
  local ok, cached = pcall(dofile, path)
  local sp = ok and type(cached) == 'table' and cached or nil
  if not sp then
    local nn = require 'ds.nn'
    local n, d = 512, 1024
    local st = core.stage_new {name = 'speed', seed = 1, nn.Linear {['in'] = d, out = d, bias = false}}
    local x = core.tensor('fp32', n, d)
    st:forward(x, false, 0, 0, 0)
    local best = math.huge
    for _ = 1, 5 do
      local t0 = core.now()
      st:forward(x, false, 0, 0, 0)
      best = math.min(best, core.now() - t0)
    end
    local a, b = core.tensor('fp32', 1 << 22), core.tensor('fp32', 1 << 22)
    local cbest = math.huge
    for _ = 1, 5 do
      local t0 = core.now()
      b:copy(a)
      cbest = math.min(cbest, core.now() - t0)
    end
    sp = {gemm_flops = 2.0 * n * d * d / best, link_bytes_s = 16.0 * (1 << 20) / cbest}
    os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
    local f = io.open(path, 'w')
    if f then
      f:write(string.format('return {gemm_flops = %.6g, link_bytes_s = %.6g}\n', sp.gemm_flops, sp.link_bytes_s))
      f:close()
    end
  end
  local gbps = tonumber(os.getenv('DS_PLAN_LINK_GBPS') or '')
  if gbps then sp.link_bytes_s = gbps * 1e9 / 8 end
  return sp
end

-- ---- shapes-only mode (`dsrun plan-memory`) ----------------------------------------------

-- DS_PLAN_MEMORY: 'report' (one prediction) or 'all' (every combination too).
local describing = false
function M.planning() return describing or (os.getenv('DS_PLAN_MEMORY') or '') ~= '' end

-- fn() with the ds library in its shapes-only mode: the models it makes are descriptions
-- (Plans) to predict for, at any size, with no memory; returns what fn returns.
function M.describe(fn)
  describing = true
  local ok, r = pcall(fn)
  describing = false
  if not ok then error(r, 0) end
  return r
end

-- The limit a rank runs under, and where it comes from: [engine] memory_limit; else, on a
-- GPU (cuda, or the simulated one), what this rank holds now plus what its device could
-- still give (the device's free memory: a GPU rank's default budget); else none (a cpu
-- rank without a memory_limit has no budget to plan for).
function M.limit()
  local l = require('ds.model').defaults().memory_limit or 0
  if l > 0 then return l, '[engine] memory_limit' end
  local mem = core.memory()
  if mem.device_kind ~= 'cpu' then
    return mem.total.current + mem.device_free, string.format('the free memory of device %s', mem.device)
  end
  return 0, 'none'
end

-- The plan, printed; the script ends here: 0 when the job fits (or no limit is known),
-- 3 when it does not.
function M.plan_and_exit(model, job)
  local limit, limit_from = M.limit()
  local allow16 = model.allow_fp16 or os.getenv('DS_PLAN_ALLOW_FP16') == '1'
  local sp = M.machine()
  job.gemm_flops, job.link_bytes_s = sp.gemm_flops, sp.link_bytes_s
  local p = M.predict(model, job)
  if M.has_auto(model.stages) then
    local chosen = M.choose(model, p.job, limit, allow16)
    if chosen then
      print('auto: the planner chooses the fastest choice predicted to fit')
      p = M.predict(model, job, chosen.choices)
    end
  end
  local nparams = 0
  for _, s in ipairs(model.stages) do
    for _, q in ipairs(s:param_table()) do nparams = nparams + q.numel end
  end
  local j = p.job
  print(string.format('memory plan: %d parameters in %d stages, world %d, micro-batch [%s], grad_accum %d, ' ..
                      'limit %s per rank (GEMM %.1f GFLOP/s, links %.2f GB/s)', nparams, #model.stages, j.world,
                      table.concat(j.batch, ', '), j.accum, limit > 0 and (hb(limit) .. ', ' .. limit_from) or 'none',
                      sp.gemm_flops / 1e9, sp.link_bytes_s / 1e9))
  print(M.report(p))
  local fits = limit == 0 or p.total_peak <= limit
  print(string.format('peak bytes: %d', p.total_peak))
  print(string.format('the job as written %s', limit == 0 and '(no limit to check)' or
                      (fits and 'fits' or 'does NOT fit')))
  local mode = os.getenv('DS_PLAN_MEMORY')
  if mode == 'all' or not fits then
    local rows, rec = M.all(model, j, {limit = limit, allow_fp16 = allow16})
    print('')
    print(M.all_report(rows, rec))
    if rec then
      -- then stage by stage: the head or the embedding need not do what the blocks do
      local best = M.refine(model, j, rec, limit, allow16)
      print(string.format('recommended: %s (peak %s, about %.1f ms per step)', M.choices_text(model, best.choices),
                          hb(best.total_peak), best.step_s * 1e3))
    else
      print(M.does_not_fit(model, j, rows, limit))
    end
  end
  io.stdout:flush()
  os.exit(fits and 0 or 3, true)
end

-- ---- 'auto': the planner chooses ---------------------------------------------------------

local remembered = setmetatable({}, {__mode = 'k'}) -- stage -> {desc=, auto=}

-- The fields of a stage description left to the planner ({zero = true, ...}), or nil.
function M.auto_fields(desc)
  local auto
  for _, k in ipairs(AUTO_FIELDS) do
    if desc[k] == 'auto' then auto = auto or {}; auto[k] = true end
  end
  return auto
end

-- The description with the table's defaults where it says 'auto' (not the job's: they
-- may be 'auto' too): what a described stage is built with until the planner chooses.
local STATIC_DEFAULT = {}
for _, o in ipairs(core.engine_options()) do STATIC_DEFAULT[o.name] = o.default end
function M.without_auto(desc)
  local d = {}
  for k, v in pairs(desc) do d[k] = v end
  for _, k in ipairs(AUTO_FIELDS) do if d[k] == 'auto' then d[k] = STATIC_DEFAULT[k] end end
  return d
end

function M.remember(stage, desc, auto) remembered[stage] = {desc = desc, auto = auto} end

function M.has_auto(stages)
  for _, s in ipairs(stages) do if remembered[s] and remembered[s].auto then return true end end
  return false
end

-- A layer description built into a (described) stage, made buildable again.
local function unbuild(layer)
  layer._built, layer._stage = nil, nil
  for _, c in ipairs(layer) do if type(c) == 'table' then unbuild(c) end end
end

-- The candidates with each stage's own fields kept where the script gave them.
local function with_fixed(stages, c)
  local t = {}
  for k, s in ipairs(stages) do
    local own, r = M.choice_of(s), remembered[s]
    t[k] = {}
    for _, f in ipairs(AUTO_FIELDS) do
      t[k][f] = (r and r.auto and r.auto[f]) and c[f] or own[f]
    end
  end
  return t
end

-- Fewer FLOPs, then fewer bytes communicated, then a smaller peak.
local function cheaper(a, b)
  local ca, cb = a.flops + a.recompute_flops, b.flops + b.recompute_flops
  if ca ~= cb then return ca < cb end
  if a.comm_bytes ~= b.comm_bytes then return a.comm_bytes < b.comm_bytes end
  return a.total_peak < b.total_peak
end

-- From prediction p, one stage at a time: the cheapest choice for that stage that keeps
-- the whole within the limit, others as they are, until nothing changes (a stage that
-- recomputes little or holds little need not do what the big one does). free(k): the
-- fields of stage k the planner may change ({zero = true, ...}), or nil for none; nil
-- free: all of them.
function M.refine(model, job, p, limit, allow_fp16, free)
  local stages = stages_of(model)
  local cands = M.candidates(job.world or core.world_size(), allow_fp16)
  for _ = 1, 4 do
    local changed = false
    for k in ipairs(stages) do
      local f = free and free(k) or (not free and {zero = true, checkpoint = true, precision = true})
      if f then
        for _, c in ipairs(cands) do
          local ch = {}
          for i, x in ipairs(p.choices) do ch[i] = x end
          local mine = {}
          for _, fld in ipairs(AUTO_FIELDS) do mine[fld] = f[fld] and c[fld] or p.choices[k][fld] end
          if M.choice_text(mine) ~= M.choice_text(p.choices[k]) then
            ch[k] = mine
            local q = M.predict(model, job, ch)
            if (limit == 0 or q.total_peak <= limit) and cheaper(q, p) then p, changed = q, true end
          end
        end
      end
    end
    if not changed then break end
  end
  return p
end

-- The fastest choice predicted to fit the limit, with the script's fixed fields kept
-- (deterministic: the same on every rank, from FLOPs and bytes, not timings). Returns
-- the per-stage choices, its prediction and how many fit; or nil and why.
function M.choose(model, job, limit, allow_fp16)
  local stages = stages_of(model)
  local best, nfit, seen = nil, 0, {}
  for _, c in ipairs(M.candidates(job.world or core.world_size(), allow_fp16)) do
    local ch = with_fixed(stages, c)
    local key = {}
    for k, x in ipairs(ch) do key[k] = M.choice_text(x) end
    key = table.concat(key, '|')
    if not seen[key] then
      seen[key] = true
      local p = M.predict(model, job, ch)
      if limit == 0 or p.total_peak <= limit then
        nfit = nfit + 1
        local cost, bcost = p.flops + p.recompute_flops, best and best.flops + best.recompute_flops
        if not best or cost < bcost or (cost == bcost and (p.comm_bytes < best.comm_bytes or
           (p.comm_bytes == best.comm_bytes and p.total_peak < best.total_peak))) then best = p end
      end
    end
  end
  if not best then return nil, 'no choice fits' end
  return M.refine(model, job, best, limit, allow_fp16, function(k) return remembered[stages[k]] and
    remembered[stages[k]].auto end), nfit
end

-- model:train_step's first call on a model with 'auto' stages: chooses from the batch's
-- shapes, builds the stages for real and the model's ZeRO object, prints the choice.
function M.resolve(model, t, model_mod)
  local x, y = t.next_batch(1)
  local next_batch, used = t.next_batch, false
  t.next_batch = function(micro)
    if micro == 1 and not used then used = true; return x, y end
    return next_batch(micro)
  end
  local job = M.job_from_batch(x, y, t)
  local limit = M.limit()
  local p, nfit = M.choose(model, job, limit, model.allow_fp16)
  if not p then
    local rows = M.all(model, job, {limit = limit, allow_fp16 = model.allow_fp16})
    util.errorf('auto: %s', M.does_not_fit(model, job, rows, limit))
  end
  -- Every stage again, in order: a later stage's tie (the GPT's head) reaches the
  -- stage built here, not the description.
  for k, s in ipairs(model.stages) do
    local r = remembered[s]
    if not r then util.errorf('auto: stage %d was not made by ds.Stage', k) end
    local d = {}
    for key, v in pairs(r.desc) do d[key] = v end
    for _, f in ipairs(AUTO_FIELDS) do d[f] = p.choices[k][f] end
    d.describe = nil
    for _, l in ipairs(d) do unbuild(l) end
    model.stages[k] = core.stage_new(d)
  end
  model.auto = nil
  model_mod.attach_zero(model)
  if core.rank() == 0 then
    print(string.format('memory plan: auto chose %s: predicted peak %s per rank%s, the fastest of %d uniform %s, then refined stage by stage',
      M.choices_text(model, p.choices), hb(p.total_peak),
      limit > 0 and (' of a limit of ' .. hb(limit)) or ' (no limit)', nfit,
      limit > 0 and 'choices that fit' or 'choices'))
  end
end

-- What the planner recommends for a model that went past its memory limit.
function M.advice(model, x, y, t)
  local ok, text = pcall(function()
    local job = M.job_from_batch(x, y, t)
    local limit = M.limit()
    local mine = M.predict(model, job)
    local rows, rec = M.all(model, job, {limit = limit})
    local head = string.format('memory plan: this choice needs %s per rank (%s)', hb(mine.total_peak), mine.peak_at)
    if rec then
      rec = M.refine(model, job, rec, limit)
      return string.format('%s; recommended: %s, predicted peak %s', head, M.choices_text(model, rec.choices), hb(rec.total_peak))
    end
    return head .. '; ' .. M.does_not_fit(model, job, rows, limit)
  end)
  return ok and text or ('memory plan: none (' .. tostring(text) .. ')')
end

local Plan = {}

-- A ds.Model in shapes-only mode: its stages are descriptions; the first train_step (or
-- forward) gives the batch's shapes and prints the plan.
function M.Plan(m, Model)
  m.plan = true
  return setmetatable(m, {__index = function(_, k) return Plan[k] or (Model and Model[k]) end})
end

function Plan:train_step(t)
  local x, y = t.next_batch(1)
  M.plan_and_exit(self, M.job_from_batch(x, y, t))
end

function Plan:forward(x, y) M.plan_and_exit(self, M.job_from_batch(x, y)) end
function Plan:zero_grad() end
function Plan:release() end

return M
