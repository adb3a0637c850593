-- expect: backward: no forward to go back through
local ds = require 'ds'
local s = ds.Stage {ds.nn.LayerNorm {d = 4}, name = 'ln'}
local g = ds.tensor('fp32', 2, 4)
s:backward(g) -- error here
