-- Publishes metrics (ds.monitor) in every attempt: steps 1 and 2, then in attempt 0 rank
-- 1 fails (exit 3) while the others wait to be stopped; a later attempt goes on to step 3.
local ds = require 'ds'
ds.monitor.total_steps(3)
local function publish(s) ds.monitor.step {step = s, loss = 10 - s, tokens = 100, time = 0.5} end
publish(1)
publish(2)
ds.barrier()
if ds.attempt() == 0 then
  if ds.rank() == 1 then
    io.stderr:write('rank 1 fails in attempt 0\n')
    os.exit(3)
  end
  while true do os.execute('sleep 0.05') end
end
publish(3)
print(string.format('rank %d done in attempt %d', ds.rank(), ds.attempt()))
