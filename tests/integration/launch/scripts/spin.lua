-- Every rank leaves a long-lived child in its process group, says it is ready, then runs
-- (and keeps starting children) until stopped. Stopping the rank must stop them all.
local ds = require 'ds'
assert(os.execute('sleep 300 < /dev/null > /dev/null 2>&1 &'))
ds.barrier()
print('ready ' .. ds.rank())
while true do os.execute('sleep 0.1') end
