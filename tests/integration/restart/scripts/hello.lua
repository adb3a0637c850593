-- Every rank prints one line with its attempt.
local ds = require 'ds'
print(string.format('rank %d of %d, attempt %d, job %s', ds.rank(), ds.world_size(), ds.attempt(), ds.job_id()))
