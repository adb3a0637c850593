-- Train a GPT-2 on one rank:
--   dsrun run examples/gpt/train.lua [CONFIG.lua] [key=value ...]
-- CONFIG.lua returns a table of settings (examples/gpt/tiny.lua); key=value pairs
-- override them (numbers, true/false, strings; model.d=128 reaches into tables).
-- data = 'synthetic' (arithmetic progressions, made here) or a token file written by
-- `dsrun tokenize`. export = PATH writes the weights as Hugging Face GPT-2 safetensors;
-- init = PATH loads such a file first. target_loss = X makes the run fail unless the
-- last logged loss is below X (the test suite uses it). ckpt = DIR with save_every = N
-- saves a state checkpoint every N steps (and at the last) and, when DIR already holds
-- one, resumes from it exactly (model:resume): a restarted job continues where its last
-- checkpoint left off. When dslaunch drains the job (a scheduler's SIGTERM/SIGUSR1),
-- every rank stops after the same step, saves it, and exits 0.
local ds = require 'ds'
local gpt = require 'ds.gpt'

-- Under a launcher the job's [engine] section (micro_batch, grad_accum, seed, the stage
-- options, the AdamW settings and the lr schedule; a DeepSpeed config maps onto it) gives
-- every training setting CONFIG.lua and key=value leave out: this script passes nil and
-- the ds library takes the job's. Alone (dsrun run), the script's own defaults below.
local D = ds.engine_defaults()
local from_job = os.getenv('DS_ENGINE_MICRO_BATCH') ~= nil
local settings = {
  model = {vocab = 64, context = 32, layers = 2, heads = 4, d = 64, dropout = 0.0},
  steps = 100, data = 'synthetic', log_every = 10, threads = 0, blocks = {}, optimizer = 'adamw',
  momentum = 0.9, save_every = 0,
}
if not from_job then
  for k, v in pairs {batch = 8, lr = 1e-3, min_lr = 1e-4, warmup = 10, weight_decay = 0.1,
                     betas = {0.9, 0.95}, eps = 1e-8, clip = 1.0} do settings[k] = v end
end

local function merge(dst, src)
  for k, v in pairs(src) do
    if type(v) == 'table' and type(dst[k]) == 'table' and #v == 0 then merge(dst[k], v) else dst[k] = v end
  end
end

local function parse_value(s)
  if s == 'true' then return true elseif s == 'false' then return false end
  return math.tointeger(tonumber(s)) or tonumber(s) or s
end

for _, a in ipairs(arg) do
  if a:match('%.lua$') then
    -- relative to the current directory, else to this script's (a launcher's workdir)
    local fh = io.open(a)
    if fh then fh:close() else a = (arg[0]:match('^(.*/)') or '') .. a end
    merge(settings, dofile(a))
  else
    local key, value = a:match('^([%w_%.]+)=(.*)$')
    if not key then error(string.format("argument '%s': expected CONFIG.lua or key=value", a)) end
    local t, last = settings, nil
    for part in key:gmatch('[^.]+') do
      if last then
        if type(t[last]) ~= 'table' then t[last] = {} end
        t = t[last]
      end
      last = part
    end
    t[last] = parse_value(value)
  end
end

local S = settings
-- a schedule of the script's own when it sets any of its settings, else the job's
if S.schedule == nil and (S.lr or S.warmup or S.min_lr) then S.schedule = 'cosine' end
if S.threads > 0 then ds.set_threads(S.threads) end
local cfg = gpt.config(S.model)
local model = gpt.GPT(cfg, {seed = S.seed, embed = S.embed, blocks = S.blocks, head = S.head})
if S.init then gpt.load_safetensors(model, S.init) end

local source
if S.data == 'synthetic' then
  source = require('ds.synth').progressions {vocab = cfg.vocab, context = cfg.context,
                                             batch = S.batch, seed = S.seed}
else
  source = ds.data.open {path = S.data, context = cfg.context, batch = S.batch, seed = S.seed,
                         vocab = cfg.vocab}
end

local opt
S.batch = S.data == 'synthetic' and source.batch_size or source:batch_size()
if S.optimizer == 'adamw' then
  opt = ds.optim.AdamW {model, lr = S.lr, betas = S.betas, eps = S.eps, weight_decay = S.weight_decay}
elseif S.optimizer == 'sgd' then
  opt = ds.optim.SGD {model, lr = S.lr or D.lr, momentum = S.momentum, weight_decay = S.weight_decay}
else
  error("optimizer must be 'adamw' or 'sgd', got " .. tostring(S.optimizer))
end
local lr_at
if S.schedule == 'constant' then lr_at = ds.optim.constant {lr = opt.lr}
elseif S.schedule == 'cosine' then
  lr_at = ds.optim.warmup_cosine {lr = opt.lr, min_lr = S.min_lr or 0, warmup = math.min(S.warmup or 0, S.steps), total = S.steps}
elseif S.schedule == nil or S.schedule == 'job' then lr_at = ds.optim.schedule()
else error("schedule must be 'cosine', 'constant' or 'job', got " .. tostring(S.schedule)) end

print(string.format('GPT: %d layers, %d heads, d %d, vocab %d, context %d: %.3fM parameters; '
  .. 'batch %d x %d, accumulation %d; %d threads', cfg.layers, cfg.heads, cfg.d, cfg.vocab,
  cfg.context, model:num_parameters() / 1e6, S.batch, cfg.context, S.accum or D.grad_accum, ds.threads()))
print(string.format('%s: lr %g, betas %g %g, eps %g, weight decay %g; schedule %s; clip %g',
  S.optimizer, opt.lr, opt.beta1 or 0, opt.beta2 or 0, opt.eps or 0, opt.weight_decay, S.schedule or ('job ' .. D.lr_schedule),
  S.clip or D.gradient_clipping))
if model.scaler then
  local ls = ds.engine_defaults().loss_scaler -- ds.Model's, as this script gives none
  print(string.format('loss scaler: initial scale %g, window %d, hysteresis %d, min %g', ls.init_scale,
    ls.scale_window, ls.hysteresis, ls.min_scale))
end
-- Under a launcher the worker logs its OpenBLAS core at start, once per node.
if not from_job then
  local blas = ds.blas()
  print('OpenBLAS kernels: ' .. blas.core .. ' (' .. blas.why .. ')')
end
for _, s in ipairs(model.stages) do
  local i = s:info()
  print(string.format('  stage %-8s %10d params  zero %d  checkpoint %s  precision %s', i.name,
    i.numel, i.zero, tostring(i.checkpoint), i.precision))
end

local first, skipped = 1, 0
if S.ckpt then
  local state = model:resume(S.ckpt, opt, {data = source})
  if state then
    first, skipped = state.step + 1, state.skipped_steps or 0
    print(string.format('resumed from %s at step %d', S.ckpt, state.step))
  end
end
local function save(step)
  model:save(S.ckpt, opt, {step = step, skipped_steps = skipped, data = source.state and source:state() or nil})
end

local metrics = S.metrics and assert(io.open(S.metrics, first > 1 and 'a' or 'w'))
local t_last, tokens_since, last_loss, drained = ds.now(), 0, nil, false
ds.monitor.total_steps(S.steps) -- the launcher's progress line and report (docs/monitoring.md)
for step = first, S.steps do
  local st = model:train_step {step = step, accum = S.accum, optimizer = opt, clip = S.clip,
    lr = lr_at(step), next_batch = function(micro) return source:batch(step, micro) end}
  tokens_since = tokens_since + st.tokens
  if st.skipped then skipped = skipped + 1 end
  if step % S.log_every == 0 or step == S.steps then
    local now = ds.now()
    local tps = tokens_since / (now - t_last)
    local mem = ds.memory().total.peak
    -- fp16: the loss scale, and the steps skipped for overflow so far
    local scale = model.scaler and string.format(' | scale %g (%d skipped)', st.loss_scale, skipped) or ''
    print(string.format('step %5d/%d | loss %.4f | lr %.2e | grad norm %.3f | %8.0f tok/s | peak mem %.1f MiB%s',
      step, S.steps, st.loss, st.lr, st.grad_norm, tps, mem / 2^20, scale))
    if metrics then
      metrics:write(string.format('{"step":%d,"loss":%.6f,"lr":%.6g,"grad_norm":%.6f,"loss_scale":%g,"skipped_steps":%d,"tokens_per_s":%.1f,"mem_peak_bytes":%d}\n',
        step, st.loss, st.lr, st.grad_norm, st.loss_scale, skipped, tps, mem))
      metrics:flush()
    end
    t_last, tokens_since = ds.now(), 0
  end
  last_loss = st.loss
  local saved = S.ckpt and S.save_every > 0 and (step % S.save_every == 0 or step == S.steps)
  if saved then save(step) end
  if ds.drain_requested(step) then -- collective: every rank gets the same answer here
    if S.ckpt and not saved then save(step) end
    print(string.format('drained at step %d%s', step, S.ckpt and '' or ' (no ckpt= given: nothing saved)'))
    drained = true
    break
  end
end
if metrics then metrics:close() end
if drained then return end
print(ds.memory_report())

if S.export then
  gpt.save_safetensors(model, S.export)
  print('exported ' .. S.export)
end
if S.target_loss and last_loss then
  if not (last_loss < S.target_loss) then
    io.stderr:write(string.format('final loss %.4f is not below target %.4f\n', last_loss, S.target_loss))
    os.exit(1)
  end
  print(string.format('final loss %.4f < target %.4f', last_loss, S.target_loss))
end
