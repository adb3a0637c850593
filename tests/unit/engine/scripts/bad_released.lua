-- expect: input tensor has no storage (released?)
local ds = require 'ds'
local a = ds.Stage {ds.nn.Linear {['in'] = 4, out = 4}, name = 'a'}
local b = ds.Stage {ds.nn.GELU {}, name = 'b'}
local h = a:forward(ds.tensor('fp32', 2, 4))
a:release()
b:forward(h) -- error here
