-- Every rank prints, passes a barrier, and writes what a log pipeline must keep intact:
-- a 100000-byte line, binary bytes, a last line without newline.
-- `dsrun run hello.lua --expect RANK WORLD` prints rank RANK's stdout without a launcher,
-- so the test can compare the log file byte for byte.
local ds = require 'ds'
local rank, world = ds.rank(), ds.world_size()
local expect = arg[1] == '--expect'
if expect then rank, world = tonumber(arg[2]), tonumber(arg[3]) end
io.write(string.format('rank %d of %d says hello\n', rank, world))
io.stderr:write(string.format('to stderr from rank %d\n', rank))
if not expect then ds.barrier() end
io.write(string.format('rank %d of %d past the barrier\n', rank, world))
io.write('L' .. string.rep('x', 100000) .. '\n')
io.write('bin \0\1\2\127\200\255 end\n')
io.write(string.format('rank %d says goodbye without newline', rank))
