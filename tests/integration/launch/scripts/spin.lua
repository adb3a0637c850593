-- Every rank says it is ready, then runs (and starts children) until stopped.
local ds = require 'ds'
ds.barrier()
print('ready ' .. ds.rank())
while true do os.execute('sleep 0.1') end
