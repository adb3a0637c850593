-- Publishes arg[1] steps with values the test knows, each rank its own, then waits for
-- the file arg[2] (the test scrapes /metrics meanwhile).
local ds = require 'ds'
local n, release = math.tointeger(tonumber(arg[1])), arg[2]
local r = ds.rank()
-- A small model for the report's stage table and memory bars, with a made-up prediction
-- (a planner's, were there one); it is never trained: the steps are the test's.
local m = ds.Model {ds.Stage {ds.nn.Embedding {vocab = 8, d = 4}, name = 'embed'},
                    ds.Stage {ds.nn.Linear {['in'] = 4, out = 8}, name = 'head'}}
for _, st in ipairs(m.stages) do print('  stage ' .. st:info().name) end
ds.monitor.model(m, {params = 4096, grads = 4096, activations = 8192})
ds.monitor.total_steps(n)
for s = 1, n do
  ds.monitor.step {step = s, loss = 100 - s + r, lr = s / 1024, grad_norm = 2 * s, tokens = 100 * (r + 1),
                   time = 0.5 + 0.25 * r, loss_scale = 1024, skipped = s == 3}
  print('published step ' .. s)
end
local deadline = ds.now() + 60
while not io.open(release) do
  if ds.now() > deadline then error('the test never released the ranks: ' .. release) end
  os.execute('sleep 0.02')
end
