-- Every rank writes about 950 KB to stdout and 100 lines to stderr, then exits 0.
local ds = require 'ds'
local line = string.rep('y', 99)
for i = 1, 9500 do io.write(string.format('%d %s\n', ds.rank(), line)) end
for i = 1, 100 do io.stderr:write(string.format('rank %d stderr line %d\n', ds.rank(), i)) end
