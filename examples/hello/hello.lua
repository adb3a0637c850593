-- Every rank says who and where it is: the smallest job that shows the plan at work.
--   dslaunch examples/hello/job.ini            (this node)
--   dslaunch --dry-run examples/hello/job.ini  (print the plan only)
--   dsrun run examples/hello/hello.lua         (one rank, no launcher)
local ds = require 'ds'

local msg = arg and arg[1]   -- [job] args arrive in the global `arg`, as in lua(1)
print(string.format('hello from rank %d of %d (local rank %d of %d, node %d, host %s, attempt %d)%s',
  ds.rank(), ds.world_size(), ds.local_rank(), ds.local_world_size(), ds.node_rank(),
  ds.host(), ds.attempt(), msg and (': ' .. msg) or ''))
