-- Publishes arg[1] steps with values the test knows, each rank its own, then waits for
-- the file arg[2] (the test scrapes /metrics meanwhile).
local ds = require 'ds'
local n, release = math.tointeger(tonumber(arg[1])), arg[2]
local r = ds.rank()
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
