-- Attempt 0: rank 1 fails (exit 3) after the barrier; later attempts succeed. Every rank
-- says which attempt it runs, so each attempt's logs can be told apart.
local ds = require 'ds'
print(string.format('rank %d attempt %d', ds.rank(), ds.attempt()))
ds.barrier()
if ds.attempt() == 0 and ds.rank() == 1 then
  io.stderr:write('rank 1 fails in attempt 0\n')
  os.exit(3)
end
if ds.attempt() == 0 then while true do os.execute('sleep 0.05') end end
print(string.format('rank %d done', ds.rank()))
