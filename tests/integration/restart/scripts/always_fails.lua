-- Rank 0 fails in every attempt.
local ds = require 'ds'
print(string.format('rank %d attempt %d', ds.rank(), ds.attempt()))
if ds.rank() == 0 then error('rank 0 fails in attempt ' .. ds.attempt()) end
ds.barrier()
