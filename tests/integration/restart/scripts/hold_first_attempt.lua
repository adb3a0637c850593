-- Every rank says where it runs; in attempt 0 they then wait (for the test to break a
-- node), in later attempts they finish.
local ds = require 'ds'
print(string.format('rank %d attempt %d on %s', ds.rank(), ds.attempt(), ds.host()))
ds.barrier()
if ds.attempt() == 0 then
  print('ready ' .. ds.rank())
  while true do os.execute('sleep 0.05') end
end
print('done ' .. ds.rank())
