-- The planner's story, one run (memplan_story.sh runs it several ways): a GPT whose
-- stages take zero=, checkpoint=, precision= (each may be 'auto') or the job's (from_job=1),
-- trained `steps` AdamW
-- steps on synthetic data; writes each step's loss to out=.
local ds = require 'ds'
local gpt = require 'ds.gpt'
local synth = require 'ds.synth'

local S = {zero = 0, checkpoint = 'none', precision = 'fp32', steps = 12, batch = 8, out = nil}
for _, a in ipairs(arg) do
  local k, v = a:match('^([%w_]+)=(.*)$')
  S[k] = math.tointeger(tonumber(v)) or tonumber(v) or v
end
local cfg = gpt.config {vocab = 128, context = 64, layers = 4, heads = 4, d = 64}
-- from_job=1: the stages take zero, checkpoint and precision from the job's [engine]
local o = S.from_job == 1 and {} or {zero = S.zero, checkpoint = S.checkpoint, precision = S.precision}
local model = gpt.GPT(cfg, {seed = 1, embed = o, blocks = o, head = o})
local opt = ds.optim.AdamW {model, lr = 3e-3}
local src = synth.progressions {vocab = cfg.vocab, context = cfg.context, batch = S.batch, seed = 5}
local f = S.out and assert(io.open(S.out, 'w'))
for step = 1, S.steps do
  local r = model:train_step {step = step, optimizer = opt, clip = 1.0,
                              next_batch = function(micro) return src:batch(step, micro) end}
  if f then f:write(string.format('%d %.6f\n', step, r.loss)) end
end
if f then f:close() end
local m = ds.memory()
print(string.format('trained %d steps; peak %d bytes', S.steps, m.total.peak))
