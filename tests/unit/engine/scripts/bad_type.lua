-- expect: nn.Linear: 'out' must be an integer, got 8.5
local ds = require 'ds'
local nn = ds.nn
local l = nn.Linear {['in'] = 4, out = 8.5} -- error here
